"""Stage 4: weight precision.

Float precisions (fp32/fp16/bf16) are applied while weights stream: the graph's activation dtype
is fixed when it is built, and `build.params.Params` casts each lazy tensor as it is written, so
no float copy of the model ever exists. This stage then checks that every float initializer has
the planned dtype. int4/int8 (MatMulNBits) will rewrite MatMul nodes here, wrapping the same lazy
tensors so that quantization streams too.

Which (EP, precision) pairs run was checked against ORT's kernel registrations (ort-ops.md §1.2):
GroupQueryAttention has CPU kernels for fp32 and fp16 (no bf16) and CUDA kernels for fp16 and
bf16 (no fp32). On CPU, fp16 runs with ORT inserting fp32 casts around ops without fp16 kernels,
so it works but is slower than fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.errors import InputError

FLOAT_DTYPES = {"fp32": ir.DataType.FLOAT, "fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
SUPPORTED: dict[str, tuple[str, ...]] = {"cpu": ("fp32", "fp16"), "cuda": ("fp16", "bf16")}
WHY_NOT: dict[tuple[str, str], str] = {
    ("cpu", "bf16"): "ORT's CPU GroupQueryAttention has no bf16 kernel",
    ("cuda", "fp32"): "ORT's CUDA GroupQueryAttention has no fp32 kernel",
}


@dataclass(frozen=True)
class PrecisionPlan:
    name: str
    io_dtype: ir.DataType  # activations, KV cache and float weights
    logits_dtype: ir.DataType

    @property
    def runs_on_cpu(self) -> bool:
        return self.name in SUPPORTED["cpu"]


@dataclass(frozen=True)
class QuantizeReport:
    precision: str
    float_initializers: int


def plan_precision(ep: str, precision: str) -> PrecisionPlan:
    """Validate an (EP, precision) pair and say which dtypes the graph uses."""
    if ep not in SUPPORTED:
        raise InputError(f"unknown --ep '{ep}'; choose one of {', '.join(SUPPORTED)}")
    if precision in ("int4", "int8"):
        raise InputError(
            f"--precision {precision} is not available yet; use one of {', '.join(SUPPORTED[ep])} for --ep {ep}"
        )
    if precision not in FLOAT_DTYPES:
        raise InputError(f"unknown --precision '{precision}'; choose one of {', '.join(FLOAT_DTYPES)}")
    if precision not in SUPPORTED[ep]:
        reason = WHY_NOT.get((ep, precision), "no kernels for it")
        raise InputError(
            f"--precision {precision} cannot run with --ep {ep} ({reason}); "
            f"use --precision {' or '.join(SUPPORTED[ep])}"
        )
    io = FLOAT_DTYPES[precision]
    # bf16 logits are too coarse for sampling; the builder also emits fp32 logits for bf16.
    logits = ir.DataType.FLOAT if precision == "bf16" else io
    return PrecisionPlan(precision, io, logits)


def quantize(model: ir.Model, plan: PrecisionPlan) -> QuantizeReport:
    """Check float initializer dtypes (int quantization lands here later)."""
    floats = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None or not tensor.dtype.is_floating_point():
            continue
        if tensor.dtype != plan.io_dtype:
            raise AssertionError(f"initializer {value.name} is {tensor.dtype.name}, planned {plan.io_dtype.name}")
        floats += 1
    return QuantizeReport(plan.name, floats)
