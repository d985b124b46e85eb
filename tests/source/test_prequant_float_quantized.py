"""compressed-tensors `float-quantized` (FP8) checkpoints dequantized exactly while streaming.

Checkpoints: tests/float_quantized_models.py (tensor with a static input_scale, channel with bf16
scales and dynamic FP8 activations, block 32x48 with partial blocks). The fp32 package must equal HF
on the twin within the project's 1e-4 and generate its greedy tokens through onnxruntime-genai;
reading the FP8 codes without their scales (the issue's silent-wrong-package bug) must break it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from float_quantized_models import ct_fp8_pair
from reference import assert_varied, genai_prompt_then_greedy, hf_generate, hf_model, parity_error

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import fp8

BOUND = 1e-4
CASES = {"tensor": "bfloat16", "channel": "bfloat16", "block": "float32"}


def export(src: Path, out: Path) -> Path:
    build(BuildOptions(str(src), out, precision="fp32", smoke=False))
    return out


@pytest.fixture(scope="module")
def channel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("channel")
    quantized, twin = ct_fp8_pair(tmp, "channel", "bfloat16")
    return quantized, twin, export(quantized, tmp / "pkg")


@pytest.mark.parametrize("strategy", list(CASES))
def test_float_quantized_dequantized_exactly(channel, tmp_path, strategy):
    if strategy == "channel":
        _, twin, package = channel
    else:
        quantized, twin = ct_fp8_pair(tmp_path, strategy, CASES[strategy])
        package = export(quantized, tmp_path / "pkg")
    assert parity_error(package, twin) < BOUND
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert not [n for n in graph.node if n.op_type == "MatMulNBits"]
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert imported["source_format"] == "compressed-tensors" and len(imported["dequantized"]) == 14


def test_float_quantized_genai_greedy_tokens_equal_hf(channel):
    _, twin, package = channel
    assert parity_error(package, twin, [0]) < BOUND  # a 1-token prompt
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])


def test_mutant_float_quantized_scales_ignored(channel, tmp_path, monkeypatch):
    monkeypatch.setattr(
        fp8.Fp8Linear, "dequantized_rows", lambda self, a, b: self.base.read(self.name, rows=(a, b)).astype(np.float32)
    )
    quantized, twin, _ = channel
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


def test_mutant_float_quantized_channel_read_as_one_scale(channel, tmp_path, monkeypatch):
    """Per-channel scales [N, 1] applied as if the first were the whole tensor's."""
    original = fp8.Fp8Linear.dequantized_rows

    def first_scale(self, a, b):
        self.block = None
        return original(self, a, b)

    monkeypatch.setattr(fp8.Fp8Linear, "dequantized_rows", first_scale)
    quantized, twin, _ = channel
    assert parity_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}, "integer or output activation"),
        ({"weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": False}}, "strategy"),
        ({"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group"}}, "float 4-bit"),
    ],
)
def test_float_quantized_variants_not_imported_are_refused(channel, tmp_path, change, says):
    quantized, _, _ = channel
    src = tmp_path / "src"
    shutil.copytree(quantized, src)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"].update(change)
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=f"pre-quantized compressed-tensors.*{says}") as err:
        export(src, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_float_quantized_at_int4_says_every_weight_was_requantized(channel, tmp_path):
    """FP8 has no MatMulNBits form: at --precision int4 the dequantized weights are quantized by the
    tool, and the manifest / inspect say so (issue item 4)."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    quantized, _, _ = channel
    build(BuildOptions(str(quantized), tmp_path / "pkg", precision="int4", smoke=False))
    imported = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["options"]["imported_quantization"]
    assert not imported["imported"] and len(imported["dequantized"]) == 14
    by_precision = imported["quantized_by_precision"]
    assert any("lm_head" in w for w in by_precision) and any("layers.1" in w for w in by_precision)
    shown = CliRunner().invoke(app, ["inspect", str(tmp_path / "pkg")], terminal_width=200).output
    assert f"0 weights imported as integers, 14 dequantized, {len(by_precision)} quantized by --precision int4" in shown


def test_build_note_counts_each_weight_once():
    """A graph weight listed once per graph that holds it (--attention split: prefill and decode)
    counts once in the build note, as in the manifest and inspect."""
    from gqa_export.quant.imported import ImportReport

    report = ImportReport("FP8", dequantized=["a", "b"], by_precision=["lm_head", "qkv", "lm_head", "qkv"])
    assert "; 2 weights quantized by --precision int4" in report.note("int4")
