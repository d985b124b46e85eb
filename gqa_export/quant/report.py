"""The accuracy report of a quantized package (`--report`, written as quant_report.json).

Per weight: the relative L2 reconstruction error of the quantized matrix (measured while it was
written). End to end, when a float package of the same model is at hand: the logits of a fixed
prompt set against the float package's, measured by running both (runtime/logit_error.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gqa_export.quant.quantize import PrecisionPlan, QuantizeReport


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
