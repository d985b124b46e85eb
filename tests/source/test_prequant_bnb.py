"""bitsandbytes checkpoints read with `build --dequantize`: dequantized exactly while streaming.

The checkpoints (tests/bnb_models.py) are a tiny llama whose 14 linears are quantized for real and
written in bitsandbytes' serialized layout with numpy (bitsandbytes is a GPU package, not installed):
NF4 with double quantization and a bfloat16 compute dtype (blocks of 64), FP4 without it in fp32
(blocks of 128, so a block spans two rows), and LLM.int8 (int8 + SCB). The twin holds what an
independent numpy reader dequantizes. The fp32 package must equal HF on the twin within 1e-4; the
nibble order and the double quantization's offset each have a mutant that breaks it. Without the
flag the checkpoint is refused in one line that names it (tests/faults/test_prequantized.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from bnb_models import bnb_pair
from families import PROMPT
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_model,
    parity_error,
    prompt_error,
)
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import bnb
from gqa_export.source.weights import WeightStore

BOUND = 1e-4
CASES = {"nf4-double": ("nf4", True, 64, "bfloat16"), "fp4": ("fp4", False, 128, "float32"),
         "int8": ("int8", False, 64, "float32")}  # fmt: skip


def export(src: Path, out: Path, precision: str = "fp32") -> Path:
    build(BuildOptions(str(src), out, precision=precision, smoke=False, dequantize=True))
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """name -> (quantized, twin, fp32 package); NF4's package is built through the CLI flag."""
    cache: dict[str, tuple[Path, Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path, Path]:
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            quantized, twin = bnb_pair(tmp, *CASES[name])
            if name == "nf4-double":
                args = ["build", str(quantized), "-o", str(tmp / "pkg"), "-p", "fp32", "--no-smoke", "--dequantize"]
                result = CliRunner().invoke(app, args)
                assert result.exit_code == 0, result.output
                package = tmp / "pkg"
            else:
                package = export(quantized, tmp / "pkg")
            cache[name] = (quantized, twin, package)
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_bnb_dequantized_equals_the_twin(made, name):
    _, twin, package = made(name)
    assert parity_error(package, twin) < BOUND
    assert parity_error(package, twin, [0]) < BOUND  # a 1-token prompt
    ops = {n.op_type for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node}
    assert "MatMulNBits" not in ops and "MatMulBnb4" not in ops
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert imported["source_format"] == "bitsandbytes" and len(imported["dequantized"]) == 14
    assert not imported["imported"]


def test_int8_tile_layout_refused(made, tmp_path):
    """An LLM.int8 weight saved in a GPU tile layout (weight_format 2, col_turing) is not row-major:
    refused in one line naming the tensor, nothing written (the row layout 0 is read: the other tests)."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from gqa_export.errors import InputError

    quantized, _, _ = made("int8")
    broken = tmp_path / "tiled"
    shutil.copytree(quantized, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.weight_format"] = np.array(2, np.uint8)
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match=r"q_proj\.weight_format is 2: an 8-bit weight saved in a GPU tile layout"):
        export(broken, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_bnb_rows_stream_across_blocks(made):
    """Rows 5..13 alone (FP4's 128-element blocks span two 64-wide rows; NF4's nested blocks of 256)."""
    from safetensors.numpy import load_file

    for name in ("fp4", "nf4-double"):
        quantized, twin, _ = made(name)
        store = WeightStore.open(quantized)
        expected = load_file(twin / "model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
        linear = bnb.bnb_linear(store, "model.layers.0.self_attn.q_proj")
        assert np.array_equal(linear.dequantized_rows(5, 13), expected[5:13])
        assert np.array_equal(linear.dequantized_rows(0, linear.n), expected)


def test_bnb_genai_greedy_and_int4(made, tmp_path):
    """12 greedy genai tokens equal HF generate on the twin; --precision int4 re-quantizes the
    dequantized weights exactly as it would the twin's (same bytes)."""
    quantized, twin, package = made("nf4-double")
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])
    a = export(quantized, tmp_path / "a", "int4")
    b = tmp_path / "b"
    build(BuildOptions(str(twin), b, precision="int4", smoke=False))
    assert (a / "model.onnx.data").read_bytes() == (b / "model.onnx.data").read_bytes()


def _prompt_error(package: Path, twin: Path) -> float:
    return prompt_error(package, twin, PROMPT)


def test_mutant_bnb_nibbles_low_first(made, tmp_path, monkeypatch):
    monkeypatch.setattr(bnb, "nibbles", lambda raw: np.stack([raw & 0xF, raw >> 4], axis=1).reshape(-1))
    quantized, twin, _ = made("fp4")
    assert _prompt_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND  # measured 9.3


def test_mutant_bnb_double_quant_offset_dropped(made, tmp_path, monkeypatch):
    """Double quantization stores absmax minus its mean: forgetting to add the mean back is wrong."""
    original = bnb.bnb_linear

    def no_offset(base, prefix):
        linear = original(base, prefix)
        linear.state = {**linear.state, "nested_offset": 0.0}
        return linear

    monkeypatch.setattr(bnb, "bnb_linear", no_offset)
    quantized, twin, _ = made("nf4-double")
    assert _prompt_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND  # measured 9.3


def test_release_variant_dequantizes_a_bitsandbytes_source(tmp_path):
    """A release spec's `dequantize: true` is `build --dequantize`: the NF4 source builds; without
    it the release is refused in one line naming the flag, and nothing is written."""
    import yaml

    quantized, _ = bnb_pair(tmp_path, *CASES["nf4-double"])
    spec = tmp_path / "release.yaml"
    variant = {"ep": "cpu", "precision": "int4", "path": "int4"}
    for dequantize, code in ((False, 2), (True, 0)):
        item = {**variant, "dequantize": True} if dequantize else variant
        fields = {"source": str(quantized), "license": "apache-2.0", "smoke": False, "variants": [item]}
        spec.write_text(yaml.safe_dump(fields))
        out = tmp_path / f"release-{dequantize}"
        result = CliRunner().invoke(app, ["release", str(spec), "-o", str(out), "-q"])
        assert result.exit_code == code, result.output
        if not dequantize:
            assert "--dequantize" in result.output and not out.exists()
    assert (tmp_path / "release-True" / "int4" / "model.onnx").is_file()
