"""nGPT's per-channel scales (ArchSpec.ngpt, Dory; docs/coverage.md §16), each a stored vector s times a
config constant (model/ngpt.py): the query after RoPE times (sqk x c) ** 2, the output gate's
pre-activation times (s_gate x c) ** 2, the MLP's gate and up times suv x sqrt(hidden), the logits times
logit_scale / initializer_range in fp32; and the weightless L2 norm every norm of the layer is.

The query scale follows RoPE and differs between the two channels of a rotation pair, so it cannot be
folded into q_proj ahead of a fused RoPE: the GQA graph applies RoPE with plain ops for these layers
(graph/decoder.py). Each vector is computed once at export in float32, as HF does in an fp32 model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES, Params


def l2_norm(b: GraphBuilder, x: ir.Value, width: int, params: Params, eps: float, name: str) -> ir.Value:
    """x * rsqrt(sum(x^2) + eps) over the last axis (`width` channels): ORT's RMSNorm at eps / width
    times a constant 1 / sqrt(width), the same value (fp32 inside)."""
    weight = b.const(np.full(width, width**-0.5, NUMPY_DTYPES[params.dtype]), f"{name}_l2_weight")
    return b.op("SimplifiedLayerNormalization", x, weight, axis=-1, epsilon=eps / width, stash_type=1, name=name)


def stored_scaled(
    b: GraphBuilder, x: ir.Value, params: Params, tensor: str, fn: Callable[[np.ndarray], np.ndarray], name: str,
    shape: tuple[int, ...] | None = None,
) -> ir.Value:  # fmt: skip
    """x times fn(the stored vector `tensor`), registered under the tensor's own name (every pass of a
    loop reads the one initializer)."""
    return b.op("Mul", x, b.initializer(tensor, params.derived(tensor, fn, shape)), name=name)


def squared(factor: float) -> Callable[[np.ndarray], np.ndarray]:
    """s -> (s x factor) ** 2, in float32 (HF's `(s * scale).square()`)."""
    return lambda v: np.square(v * np.float32(factor))


def times(factor: float) -> Callable[[np.ndarray], np.ndarray]:
    """s -> s x factor, in float32."""
    return lambda v: v * np.float32(factor)


def logit_scaled(
    b: GraphBuilder, logits: ir.Value, params: Params, tensor: str, factor: float, dtype: ir.DataType
) -> ir.Value:
    """The logits (already in the logits dtype) times logit_scale x factor per vocabulary entry: a float32
    vector (HF multiplies the fp32 logits), cast to the logits' dtype where that is narrower."""
    rows = int(params.store.info(tensor).shape[0])

    def evaluate() -> ir.TensorProtocol:
        v = np.asarray(params.store.read(tensor), dtype=np.float32)
        return ir.Tensor(np.ascontiguousarray(v * np.float32(factor)))

    vector = b.initializer(tensor, ir.LazyTensor(evaluate, dtype=ir.DataType.FLOAT, shape=ir.Shape((rows,))))
    if dtype != ir.DataType.FLOAT:
        vector = b.op("Cast", vector, to=dtype)
    return b.op("Mul", logits, vector, name="logit_scale")
