"""FP8 MoE experts dequantized exactly while streaming, then the ordinary MoE path.

Checkpoints (tests/float_quantized_models.py `fp8_moe_pair`): a tiny DeepSeek-V3 (MLA with q-LoRA,
sigmoid grouped routing with a selection bias, a shared expert; first layer dense) and a tiny
Qwen3-MoE, every linear inside the layers (attention, MLA's low-rank projections, experts, shared
experts) in FP8 e4m3 as the releases store them: block scales `weight_scale_inv` (partial last
blocks), or compressed-tensors float-quantized per channel; the router stays float. The twin holds
float(w8) * scale in fp32. The fp32 package must equal HF on the twin within 1e-4 (docs/prequantized.md
§7.5); mutants that pair an expert with another expert's scales, or ignore the experts' scales, break it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from float_quantized_models import fp8_moe_pair
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_model,
    parity_error,
    prompt_error,
)
from safetensors import safe_open

from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import fp8

BOUND = 1e-4
CASES = {
    "deepseek_v3-block": ("deepseek_v3", "block", (16, 24)),
    "qwen3_moe-block128": ("qwen3_moe", "block", (128, 128)),  # the release's block: one partial block here
    "qwen3_moe-ct-channel": ("qwen3_moe", "channel", (1, 1)),
}


def export(src: Path, out: Path, precision: str = "fp32") -> Path:
    build(BuildOptions(str(src), out, precision=precision, smoke=False))
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """name -> (quantized checkpoint, twin, fp32 package), each built once per module."""
    cache: dict[str, tuple[Path, Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path, Path]:
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            quantized, twin = fp8_moe_pair(tmp, *CASES[name])
            cache[name] = (quantized, twin, export(quantized, tmp / "pkg"))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_fp8_experts_equal_dequantized_twin(made, name):
    quantized, twin, package = made(name)
    assert parity_error(package, twin) < BOUND
    assert parity_error(package, twin, [0]) < BOUND
    ops = [n.op_type for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node]
    assert "MoE" in ops and "MatMulNBits" not in ops  # the float MoE op, on the dequantized experts
    manifest = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    with safe_open(str(quantized / "model.safetensors"), "np") as f:
        scales = [k for k in f.keys() if k.endswith((".weight_scale_inv", ".weight_scale"))]
    assert not manifest["imported"] and len(manifest["dequantized"]) == len(scales)  # every FP8 linear
    assert sum(".experts." in n for n in manifest["dequantized"]) == 8 * 3
    if name.startswith("deepseek"):  # MLA's projections and the shared expert are FP8 too
        assert any("kv_b_proj" in n for n in manifest["dequantized"])
        assert any("shared_experts" in n for n in manifest["dequantized"])


def test_deepseek_genai_greedy_and_int4(made, tmp_path):
    """12 greedy genai tokens equal HF generate on the twin; --precision int4 quantizes the
    dequantized experts into QMoE exactly as it would the twin (same bytes) and generates."""
    quantized, twin, package = made("deepseek_v3-block")
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(twin), list(PROMPT), 12)
    assert_varied([tokens])
    a, b = export(quantized, tmp_path / "a", "int4"), export(twin, tmp_path / "b", "int4")
    assert (a / "model.onnx.data").read_bytes() == (b / "model.onnx.data").read_bytes()
    ops = [n.op_type for n in onnx.load(str(a / "model.onnx"), load_external_data=False).graph.node]
    assert "QMoE" in ops
    _, int4_tokens = genai_prompt_then_greedy(a, list(PROMPT), 6)
    assert len(int4_tokens) == 6


def _prompt_error(package: Path, twin: Path) -> float:
    return prompt_error(package, twin, PROMPT)


@pytest.mark.parametrize("mutant", ["scales-of-the-next-expert", "expert-scales-ignored"])
def test_mutant_expert_scales(made, tmp_path, monkeypatch, mutant):
    """Each expert's codes with its own block scales: another expert's, or none, is far off."""
    original = fp8.Fp8Linear.dequantized_rows

    def wrong(self, a, b):
        if ".experts." not in self.name:
            return original(self, a, b)
        if mutant == "expert-scales-ignored":
            return self.base.read(self.name, rows=(a, b)).astype(np.float32)
        head, tail = self.scale_name.split(".experts.")
        e, rest = tail.split(".", 1)
        other = fp8.Fp8Linear(self.name, self.base, f"{head}.experts.{(int(e) + 1) % 8}.{rest}", self.n, self.k,
                              self.block)  # fmt: skip
        return original(other, a, b)

    monkeypatch.setattr(fp8.Fp8Linear, "dequantized_rows", wrong)
    quantized, twin, _ = made("deepseek_v3-block")
    assert _prompt_error(export(quantized, tmp_path / "pkg"), twin) > 100 * BOUND  # measured 0.31 / 3.2
