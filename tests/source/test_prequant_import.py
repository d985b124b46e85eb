"""Pre-quantized GPTQ / AWQ checkpoints imported into MatMulNBits without re-quantizing.

Each checkpoint is a real quantization of a tiny llama written in the format's on-disk layout
(tests/prequant_models.py); its twin holds the same integers dequantized in fp32. The imported
package must equal HF on the twin within the project's 1e-4 (MatMulNBits at accuracy level 0
dequantizes in fp32: measured ~1e-5) and generate the same greedy tokens through
onnxruntime-genai; no MatMulNBits has a g_idx input. Mutants of each mechanism (zero-point
offset, act-order permutation, nibble order, AWQ's column order) must break the bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from prequant_models import awq_pair, fp8_pair, gptq_pair, packed_pair
from reference import assert_varied, genai_prompt_then_greedy, hf_generate, hf_model, parity_error

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import fp8, native

BOUND = 1e-4
CASES = {
    # name -> gptq_pair / awq_pair arguments
    "gptq-v1-4bit-act-order": dict(bits=4, group=32, act_order=True),
    "gptq-v2-4bit-sym": dict(bits=4, group=32, act_order=False, sym=True, v2=True),
    "gptq-v2-4bit-asym-g16": dict(bits=4, group=16, act_order=True, v2=True),
    "gptq-v1-8bit-act-order": dict(bits=8, group=64, act_order=True),
    "gptq-v1-2bit": dict(bits=2, group=32, act_order=False),
    "gptq-v1-4bit-per-channel": dict(bits=4, group=-1, act_order=False),
    "awq-gemm": dict(group=32),
    "ct-4bit-group-asym-act-order": dict(bits=4, group=32, act_order=True),
    "ct-4bit-channel-sym": dict(bits=4, group=-1, sym=True),
    "ct-8bit-group-sym": dict(bits=8, group=32, sym=True),
}
MAKERS = {"gptq": gptq_pair, "awq": awq_pair, "ct": packed_pair}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            tmp = tmp_path_factory.mktemp(name)
            made[name] = MAKERS[name.split("-")[0]](tmp, **CASES[name])
        return made[name]

    return get


def export(src: Path, out: Path, precision: str = "fp32") -> Path:
    build(BuildOptions(str(src), out, precision=precision, smoke=False))
    return out


def nbits_nodes(package: Path) -> list[onnx.NodeProto]:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    return [n for n in graph.node if n.op_type == "MatMulNBits"]


@pytest.mark.parametrize("name", list(CASES))
def test_imported_equals_dequantized_twin(pairs, tmp_path, name):
    quantized, twin = pairs(name)
    package = export(quantized, tmp_path / "pkg")
    assert parity_error(package, twin) < BOUND
    assert parity_error(package, twin, [0]) < BOUND  # a 1-token prompt
    nodes = nbits_nodes(package)
    assert len(nodes) >= 8  # q/k/v (packed or not), o, gate/up, down in both layers
    assert all(len(n.input) <= 4 for n in nodes)  # never a g_idx input
    sym = CASES[name].get("sym", False)
    assert all((len(n.input) == 3) == sym for n in nodes)  # symmetric: no zero-point input
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    gathers = [n for n in graph.node if n.name.endswith("/act_order")]
    assert bool(gathers) == bool(CASES[name].get("act_order", False))
    manifest = json.loads((package / "manifest.json").read_text())
    imported = manifest["options"]["imported_quantization"]
    assert len(imported["imported"]) == 14 and not imported["dequantized"]


@pytest.mark.parametrize("name", ["gptq-v1-4bit-act-order", "awq-gemm", "ct-4bit-group-asym-act-order"])
def test_genai_greedy_tokens_equal_hf_on_the_twin(pairs, tmp_path, name):
    quantized, twin = pairs(name)
    package = export(quantized, tmp_path / "pkg")
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])


def test_int4_precision_keeps_the_checkpoint_integers(pairs, tmp_path):
    """--precision int4 quantizes only what the checkpoint left float (here: the lm_head)."""
    quantized, _twin = pairs("gptq-v1-4bit-act-order")
    result = build(BuildOptions(str(quantized), tmp_path / "pkg", precision="int4", smoke=False))
    assert any("keep the checkpoint's GPTQ integers" in note for note in result.notes)
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["options"]["quantization"]["quantized_weights"] >= 1  # the float lm_head
    assert len(manifest["options"]["imported_quantization"]["imported"]) == 14
    assert all("gptq v1 4-bit group 32" in v for v in manifest["options"]["imported_quantization"]["imported"].values())
    from typer.testing import CliRunner

    from gqa_export.cli import app

    shown = CliRunner().invoke(app, ["inspect", str(tmp_path / "pkg")], terminal_width=200)
    assert "GPTQ: 14 weights imported as integers, 0 dequantized" in shown.output


def test_mutant_zero_point_offset_v1_read_as_v2(pairs, tmp_path):
    """v1 data declared gptq_v2: every zero point off by one (the official builder's confusion, reversed)."""
    quantized, twin = pairs("gptq-v1-4bit-act-order")
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"]["checkpoint_format"] = "gptq_v2"
    mutant = tmp_path / "mutant"
    import shutil

    shutil.copytree(quantized, mutant)
    (mutant / "config.json").write_text(json.dumps(config))
    assert parity_error(export(mutant, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_permutation_dropped(pairs, tmp_path, monkeypatch):
    def unpermuted(self, a, b):
        packed = native.pack_fields(self.codes(a, b), self.bits)
        return packed.reshape(b - a, self.k_blocks, self.block_size * self.bits // 8)

    monkeypatch.setattr(native.NativeLinear, "packed_rows", unpermuted)
    quantized, twin = pairs("gptq-v1-4bit-act-order")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_nibbles_swapped(pairs, tmp_path, monkeypatch):
    original = native.unpack_fields

    def swapped(u8: np.ndarray, bits: int) -> np.ndarray:
        fields = original(u8, bits)
        return fields.reshape(*fields.shape[:-1], -1, 8 // bits)[..., ::-1].reshape(fields.shape)

    monkeypatch.setattr(native, "unpack_fields", swapped)
    quantized, twin = pairs("gptq-v1-4bit-act-order")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_packed_zero_points_read_along_groups(pairs, tmp_path, monkeypatch):
    """compressed-tensors packs zero points along N (dim 0): read them along the groups instead."""

    def along_groups(words: np.ndarray, bits: int, n: int) -> np.ndarray:
        return native.unpack_fields(native.words_as_bytes(words), bits).reshape(n, -1)

    monkeypatch.setattr(native, "packed_zero_points", along_groups)
    quantized, twin = pairs("ct-4bit-group-asym-act-order")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_awq_column_order_ignored(pairs, tmp_path, monkeypatch):
    monkeypatch.setattr(native, "AWQ_ORDER", np.arange(8))
    quantized, twin = pairs("awq-gemm")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_symmetric_zero_points_known_answer(pairs, tmp_path):
    """Known answer (docs/prequantized.md §3.1): symmetric 4-bit qzeros are 0x77777777 in v1
    (zero - 1) and 0x88888888 in v2; both import with no zero-point input."""
    from safetensors.numpy import load_file

    v1, _ = gptq_pair(tmp_path, act_order=False, sym=True)
    for src, word in ((v1, 0x77777777), (pairs("gptq-v2-4bit-sym")[0], 0x88888888)):
        zeros = load_file(src / "model.safetensors")["model.layers.0.self_attn.q_proj.qzeros"]
        assert (zeros.view(np.uint32) == word).all()
    assert all(len(n.input) == 3 for n in nbits_nodes(export(v1, tmp_path / "pkg")))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"bits": 3}, "3-bit GPTQ"),
        ({"dynamic": {"+:.*q_proj": {"bits": 8}}}, "dynamic"),
        ({"checkpoint_format": "marlin"}, "marlin"),
    ],
)
def test_gptq_variants_not_imported_are_refused(pairs, tmp_path, change, says):
    quantized, _ = pairs("gptq-v1-2bit")
    import shutil

    mutant = tmp_path / "src"
    shutil.copytree(quantized, mutant)
    config = json.loads((mutant / "config.json").read_text())
    config["quantization_config"].update(change)
    (mutant / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=f"pre-quantized GPTQ.*{says}") as err:
        export(mutant, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"format": "float-quantized"}, "float-quantized"),
        ({"input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}, "quantized activations"),
        ({"weights": {"num_bits": 4, "type": "int", "strategy": "tensor"}}, "strategy 'tensor'"),
    ],
)
def test_packed_variants_not_imported_are_refused(pairs, tmp_path, change, says):
    quantized, _ = pairs("ct-8bit-group-sym")
    import shutil

    mutant = tmp_path / "src"
    shutil.copytree(quantized, mutant)
    config = json.loads((mutant / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"].update(change)
    if "format" in change:
        config["quantization_config"]["format"] = change["format"]
    (mutant / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=f"pre-quantized compressed-tensors.*{says}") as err:
        export(mutant, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("block", [(48, 48), (128, 128), None])
def test_fp8_dequantized_exactly(tmp_path, block):
    """FP8 block-wise (partial last blocks with 48) and per-tensor: exact at fp32, tokens equal."""
    quantized, twin = fp8_pair(tmp_path, block)
    package = export(quantized, tmp_path / "pkg")
    assert parity_error(package, twin) < BOUND
    assert not nbits_nodes(package)
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert imported["source_format"] == "FP8" and len(imported["dequantized"]) == 14
    if block == (48, 48):
        _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
        assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
        assert_varied([tokens])


def test_mutant_fp8_scales_ignored(tmp_path, monkeypatch):
    """The reported bug: FP8 codes read without their block scales."""
    monkeypatch.setattr(
        fp8.Fp8Linear, "dequantized_rows", lambda self, a, b: self.base.read(self.name, rows=(a, b)).astype(np.float32)
    )
    quantized, twin = fp8_pair(tmp_path, (48, 48))
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_fp8_block_transposed(tmp_path, monkeypatch):
    """Block scales indexed [k-block, n-block]: wrong wherever the scale grid is not symmetric."""
    original = fp8.Fp8Linear.dequantized_rows

    def transposed(self, a, b):
        if self.block is None:
            return original(self, a, b)
        w = self.base.read(self.name, rows=(a, b)).astype(np.float32)
        scale = self.base.read(self.scale_name).astype(np.float32)
        bn, bk = self.block
        idx_n, idx_k = np.arange(a, b) // bn, np.arange(self.k) // bk
        padded = np.ones((max(scale.shape),) * 2, np.float32)
        padded[: scale.shape[1], : scale.shape[0]] = scale.T
        return w * padded[idx_n][:, idx_k]

    monkeypatch.setattr(fp8.Fp8Linear, "dequantized_rows", transposed)
    quantized, twin = fp8_pair(tmp_path, (48, 48))
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_packed_projections_with_different_permutations_are_refused(tmp_path, monkeypatch):
    """q/k/v packed into one MatMul must share one act-order permutation; otherwise one line."""
    import prequant_models

    monkeypatch.setattr(prequant_models, "SHARED_INPUT", {})  # each projection its own permutation
    quantized, _ = prequant_models.gptq_pair(tmp_path)
    with pytest.raises(InputError, match="packed into one MatMul") as err:
        export(quantized, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_packed_weights_stream_in_row_blocks(pairs, tmp_path, monkeypatch):
    """B is written a block of output rows at a time from the checkpoint's codes (bounded memory),
    and the package is still exact."""
    from gqa_export.graph import params

    monkeypatch.setattr(params, "CHUNK_BYTES", 16 * 128)  # 16 rows of K=128 (8..32 rows a block here)
    seen: list[int] = []
    original = native.NativeLinear.packed_rows

    def recording(self, a, b):
        seen.append(b - a)
        return original(self, a, b)

    monkeypatch.setattr(native.NativeLinear, "packed_rows", recording)
    quantized, twin = pairs("gptq-v1-4bit-act-order")
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) < BOUND
    assert seen and max(seen) <= 32 and len(seen) >= 14 * 2


def test_quantized_expert_stacks_are_refused(pairs, tmp_path):
    """Per-expert quantized Linears are imported (tests/source/test_prequant_moe.py); a quantized tensor that is
    not a 2-D linear (a stacked [E, ...] expert tensor) is not: one line naming it."""
    import shutil

    from safetensors.numpy import load_file, save_file

    quantized, _ = pairs("gptq-v1-2bit")
    src = tmp_path / "src"
    shutil.copytree(quantized, src)
    tensors = load_file(src / "model.safetensors")
    name = "model.layers.0.mlp.down_proj.qweight"
    tensors[name] = tensors[name][None]
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match="GPTQ-quantized tensor that is not a 2-D linear") as err:
        export(src, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_fp8_int4_equals_the_twin_int4_byte_for_byte(tmp_path):
    """FP8's dequantized weights then follow --precision like a float checkpoint's: the same bytes."""
    quantized, twin = fp8_pair(tmp_path, (48, 48))
    a, b = export(quantized, tmp_path / "a", "int4"), export(twin, tmp_path / "b", "int4")
    assert (a / "model.onnx.data").read_bytes() == (b / "model.onnx.data").read_bytes()
