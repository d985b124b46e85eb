"""The accuracy report of a quantized package (`--report`, written as quant_report.json).

Per weight: the relative L2 reconstruction error of the quantized matrix (measured while it was
written). End to end, when a float package of the same model is at hand: the logits at every position of a
fixed prompt set, from both through onnxruntime-genai (a `--prune-lm-head` package through its
full-logits view, runtime/decode.py, so every position is scored either way), as relative L2
error and next-token agreement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.quant.quantize import PrecisionPlan, QuantizeReport
from gqa_export.runtime.decode import position_logits

PROMPT_SEED = 1234
PROMPTS = 4
PROMPT_LENGTH = 48


def fixed_prompts(vocab_size: int) -> list[list[int]]:
    rng = np.random.default_rng(PROMPT_SEED)
    upper = min(vocab_size, 32000)
    return [rng.integers(0, upper, PROMPT_LENGTH).tolist() for _ in range(PROMPTS)]


def prompt_logits(package: Path, prompts: list[list[int]]) -> list[np.ndarray]:
    """Each prompt's logits at every position ([len(prompt), V]) on CPU."""
    logits = position_logits(package, "cpu")
    return [logits.at_positions(np.asarray(prompt), 0) for prompt in prompts]


def logit_error(float_package: Path, quant_package: Path, vocab_size: int) -> dict[str, float]:
    prompts = fixed_prompts(vocab_size)
    ref, got = prompt_logits(float_package, prompts), prompt_logits(quant_package, prompts)
    diff = sum(float(((g - r) ** 2).sum()) for g, r in zip(got, ref, strict=True))
    norm = sum(float((r**2).sum()) for r in ref)
    agree = np.mean([float((g.argmax(-1) == r.argmax(-1)).mean()) for g, r in zip(got, ref, strict=True)])
    positions = sum(len(r) for r in ref)
    return {
        "relative_l2": float(np.sqrt(diff / norm)),
        "next_token_agreement": float(agree),
        "prompts": len(prompts),
        "positions": positions,
    }


def build_report(
    report: QuantizeReport, manifest_quant: dict[str, Any] | None, end_to_end: dict[str, float] | None
) -> dict[str, Any]:
    errors = report.relative_errors()
    values = list(errors.values())
    return {
        "quantization": manifest_quant,
        "weights": {k: round(v, 6) for k, v in sorted(errors.items())},
        "weights_summary": {
            "count": len(values),
            "mean_relative_l2": float(np.mean(values)) if values else None,
            "max_relative_l2": float(np.max(values)) if values else None,
        },
        "logits_vs_float": end_to_end,
    }


def quantization_manifest(plan: PrecisionPlan, report: QuantizeReport) -> dict[str, object] | None:
    """What the manifest records about weight quantization (None for float precisions)."""
    if plan.nbits is None:
        return None
    return {
        "bits": plan.nbits.bits,
        "block_size": plan.nbits.block_size,
        "symmetric": plan.nbits.symmetric,
        "method": plan.nbits.method,
        "accuracy_level": plan.accuracy_level,
        "keep_float": list(plan.keep_float),
        "excluded": sorted(set(report.kept_float)),
        "quantized_weights": len(set(report.quantized)),
        "mixed_precision": [f"{selector}:int{bits}" for selector, bits in plan.mixed],
        "weights_by_bits": {
            f"int{b}": sum(1 for v in report.bits.values() if v == b) for b in sorted(set(report.bits.values()))
        },
    }
