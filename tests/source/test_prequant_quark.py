"""AMD Quark int4 / uint4 checkpoints imported into MatMulNBits without re-quantizing.

The checkpoints are real per-group quantizations of a tiny llama written in Quark's export layout
(tests/quark_models.py); the twins are what an independent numpy reader of that layout dequantizes.
The imported package (accuracy level 0 at fp32) must equal HF on the twin within the project's 1e-4,
generate its greedy tokens through onnxruntime-genai, use MatMulNBits with no g_idx input; the
nibble order, the int4 zero-point offset and the scale layout each have a mutant that breaks it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from quark_models import quark_pair, quark_tensors, read_quark
from reference import assert_varied, genai_prompt_then_greedy, hf_generate, hf_model, parity_error

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import quark
from gqa_export.source.native import unpack_fields
from gqa_export.source.weights import WeightStore

BOUND = 1e-4
UINT4 = dict(dtype="uint4", group=32, pack="reorder")
# int4 symmetric, AMD's "order" packing, down_proj in groups of 64 through layer_quant_config
INT4 = dict(dtype="int4", group=16, pack="order", layers={"*.down_proj": 64})


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out: dict[str, tuple[Path, Path, Path]] = {}
    for name, args in (("uint4", UINT4), ("int4", INT4)):
        tmp = tmp_path_factory.mktemp(name)
        quantized, twin = quark_pair(tmp, **args)
        out[name] = (quantized, twin, export(quantized, tmp / "pkg"))
    return out


def export(src: Path, out: Path) -> Path:
    build(BuildOptions(str(src), out, precision="fp32", smoke=False))
    return out


def nbits_nodes(package: Path) -> list[onnx.NodeProto]:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    return [n for n in graph.node if n.op_type == "MatMulNBits"]


@pytest.mark.parametrize("name", ["uint4", "int4"])
def test_quark_imported_equals_the_twin(made, name):
    _, twin, package = made[name]
    assert parity_error(package, twin) < BOUND
    assert parity_error(package, twin, [0]) < BOUND  # a 1-token prompt
    nodes = nbits_nodes(package)
    assert len(nodes) >= 8 and all(len(n.input) <= 4 for n in nodes)  # never a g_idx input
    assert all((len(n.input) == 3) == (name == "int4") for n in nodes)  # symmetric int4: no zero points
    blocks = {a.i for n in nodes for a in n.attribute if a.name == "block_size"}
    assert blocks == ({32} if name == "uint4" else {16, 64})  # layer_quant_config's group for down_proj
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert imported["source_format"] == "Quark" and len(imported["imported"]) == 14 and not imported["dequantized"]
    assert all(v.startswith(f"quark {name} 4-bit") for v in imported["imported"].values())


def test_quark_genai_greedy_tokens_equal_hf_on_the_twin(made):
    _, twin, package = made["uint4"]
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])


def test_quark_reader_and_importer_agree_with_padded_columns(tmp_path):
    """N = 20 (not a multiple of 8: the last word is padding), int4 and uint4, both packings:
    the importer's float view and MatMulNBits blobs equal the independent reader's values."""
    from safetensors.numpy import save_file

    w = np.random.default_rng(3).standard_normal((20, 64)).astype(np.float32)
    for dtype in ("int4", "uint4"):
        for pack in ("reorder", "order"):
            tensors = quark_tensors("m.proj", w, dtype, 16, pack)
            twin = tensors.pop("__twin__")
            save_file(tensors, str(tmp_path / "m.safetensors"))
            store = WeightStore.open(tmp_path)
            weight = {"dtype": dtype, "group_size": 16}
            qc = {"global_quant_config": {"weight": weight}, "export": {"pack_method": pack}}
            linear = quark.quark_linear(store, "m.proj", qc)
            assert np.array_equal(linear.dequantized_rows(0, 20), twin)
            assert np.array_equal(linear.dequantized_rows(5, 13), twin[5:13])
            scales, zp = linear.params()
            codes = unpack_fields(linear.packed_rows(0, 20).reshape(20, -1), 4).astype(np.float32)
            zp = np.full(scales.shape, 8, np.uint8) if zp is None else zp
            rebuilt = (codes - np.repeat(zp, 16, axis=1)) * np.repeat(scales, 16, axis=1)
            assert np.array_equal(rebuilt, twin)
            assert np.array_equal(read_quark(*tensors.values(), dtype, pack), twin)


def test_mutant_quark_nibble_order_ignored(made, tmp_path, monkeypatch):
    monkeypatch.setattr(quark, "PACK_ORDER", np.arange(8))
    quantized, twin, _ = made["uint4"]
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_quark_int4_zero_point_offset_missing(made, tmp_path, monkeypatch):
    """int4 zero points read as stored (0) instead of moved by +8 like the codes."""

    def as_stored(words, reorder, signed, n):
        return quark.quark_unpack(words, reorder)[:, :n].T.copy()

    monkeypatch.setattr(quark, "zero_points", as_stored)
    quantized, twin, _ = made["int4"]
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_quark_scales_read_untransposed(made, tmp_path, monkeypatch):
    """weight_scale read as [N, G] (quark < 1.0's layout) instead of [G, N]."""
    original = WeightStore.read

    def untransposed(self, name, rows=None, cols=None):
        got = original(self, name, rows, cols)
        return got.reshape(got.shape[::-1]).T if name.endswith(".weight_scale") else got

    monkeypatch.setattr(WeightStore, "read", untransposed)
    quantized, twin, _ = made["uint4"]
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


MOE = {"uint4": UINT4, "int4": dict(INT4, layers={"*.down_proj": 32})}  # int4: experts' gate/up 16, down 32


@pytest.fixture(scope="module")
def moe_made(tmp_path_factory):
    """A tiny Qwen3-MoE (8 experts, top 3, one MoE and one dense layer) in Quark's layout, per dtype."""
    cache: dict[str, tuple[Path, Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path, Path]:
        if name not in cache:
            tmp = tmp_path_factory.mktemp(f"moe-{name}")
            quantized, twin = quark_pair(tmp, moe="qwen3_moe", **MOE[name])
            cache[name] = (quantized, twin, export(quantized, tmp / "pkg"))
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["uint4", "int4"])
def test_quark_moe_experts_into_qmoe_equal_the_twin(moe_made, name):
    """Quark's 4-bit experts share one width and have no act-order: one QMoE holds them exactly
    (docs/prequantized.md §7.1), block 16 for int4's mixed groups, zero points only for uint4."""
    _, twin, package = moe_made(name)
    assert parity_error(package, twin) < BOUND
    assert parity_error(package, twin, [0]) < BOUND
    nodes = onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node
    qmoe = [n for n in nodes if n.op_type == "QMoE"]
    assert len(qmoe) == 1 and not [n for n in nodes if n.op_type == "MoE"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in qmoe[0].attribute}
    assert attrs["block_size"] == (32 if name == "uint4" else 16)
    assert (len(qmoe[0].input) > 11 and qmoe[0].input[11] != "") == (name == "uint4")  # fc1 zero points
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    experts = [how for w, how in imported["imported"].items() if ".experts." in w]
    assert len(experts) == 8 * 3 and all(how.endswith("(QMoE)") for how in experts) and not imported["dequantized"]


def test_mutant_quark_moe_int4_zero_point_offset_missing(moe_made, tmp_path, monkeypatch):
    """The experts' int4 zero points read as stored (0) instead of moved by +8 like the codes."""
    monkeypatch.setattr(
        quark, "zero_points", lambda words, reorder, signed, n: quark.quark_unpack(words, reorder)[:, :n].T.copy()
    )
    quantized, twin, _ = moe_made("int4")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND  # measured 5.4


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"weight": {"dtype": "fp8_e4m3", "qscheme": "per_tensor"}}, "fp8_e4m3 weights"),
        ({"input_tensors": {"dtype": "int8", "qscheme": "per_tensor"}}, "quantized input_tensors \\(int8"),
        ({"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}}, "fp4 weights"),
        ({"weight": {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0}}, "int8 weights"),
        ({"weight": {"dtype": "uint4", "qscheme": "per_channel", "ch_axis": 0}}, "uint4 qscheme 'per_channel'"),
        ({"weight": [{"dtype": "uint4"}, {"dtype": "fp8_e4m3"}]}, "several quantizers"),
    ],
)
def test_quark_variants_not_imported_are_refused(made, tmp_path, change, says):
    quantized, _, _ = made["uint4"]
    src = tmp_path / "src"
    shutil.copytree(quantized, src)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"]["global_quant_config"].update(change)
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=f"pre-quantized Quark.*{says}") as err:
        export(src, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_int4_precision_keeps_quark_integers_and_says_where_each_came_from(made, tmp_path):
    """--precision int4 on a Quark checkpoint (issue item 4): the checkpoint's 14 linears keep their
    integers, the lm_head it left float is quantized by the tool; the build note, the manifest and
    inspect say which is which."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    quantized, _, _ = made["uint4"]
    result = build(BuildOptions(str(quantized), tmp_path / "pkg", precision="int4", smoke=False))
    note = next(n for n in result.notes if n.startswith("pre-quantized Quark"))
    assert "14 linear layers keep the checkpoint's Quark integers" in note
    assert "1 weights quantized by --precision int4" in note
    imported = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["options"]["imported_quantization"]
    assert len(imported["imported"]) == 14 and imported["precision"] == "int4"
    assert [w for w in imported["quantized_by_precision"] if "lm_head" in w] == imported["quantized_by_precision"]
    shown = CliRunner().invoke(app, ["inspect", str(tmp_path / "pkg")], terminal_width=200).output
    assert "Quark: 14 weights imported as integers, 0 dequantized, 1 quantized by --precision int4" in shown
