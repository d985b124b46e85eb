"""Differential attention (DiffLlama): each pair of query heads (h, h + Nq/2) gives
(softmax(q k) V1 - lambda softmax(q k) V2) over [V1 | V2], then a weightless RMSNorm over 2D channels
times (1 - lambda_init) (ArchSpec.differential_attention; docs/coverage.md §13).

transformers runs two attention calls that share q and k, one over each half of the value heads
(V1's kv head j is head j mod Nkv/2, V2's is Nkv/2 + j mod Nkv/2), and concatenates them per query
head. One GroupQueryAttention computes the same: its heads are 2D wide, the queries and keys are
zero-padded from D to 2D (zeros add nothing to q . k; RoPE rotates the first D channels, partial
rotary) and each kv head's value is [V1 | V2] (the cache holds it), with the scale D ** -0.5
(ArchSpec.half_head_dim_scale). Query head h's output is then [out1_h | out2_h] as transformers
concatenates them. lambda is a per-layer constant of stored parameters, computed at export in
float32 as the class does: exp(sum(lambda_q1 lambda_k1)) - exp(sum(lambda_q2 lambda_k2)) + lambda_init,
lambda_init = 0.8 - 0.6 exp(-0.3 i)."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import NUMPY_DTYPES, float_scalar
from gqa_export.graph.rotary import rotated_if
from gqa_export.graph.value_heads import zero_padded_heads


def _padded_heads(
    lc: LayerContext, x: ir.Value, heads: int, width: int, table: tuple[ir.Value, ir.Value] | None, tag: str
) -> ir.Value:
    """x [B,S,heads*width] -> [B,S,heads*2*width], each head rotated by `table` where given, its second half zero."""
    per_head = lc.b.op("Reshape", x, lc.b.const([0, 0, heads, width], f"{tag}_diff_heads", "int64"))
    rope = lc.dims.ropes.get(lc.layer.rope) if lc.layer.rope is not None else None
    rotated = rotated_if(lc.b, per_head, table, rope, width, tag)
    return zero_padded_heads(lc.b, rotated, heads, width, width, tag, "diff")


def differential_qkv(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """GroupQueryAttention's q, k (rotated by `table` where given, zero-padded to 2D per head) and v ([V1 | V2]
    per kv head)."""
    L, b, layer = lc.spec.layer, lc.b, lc.layer
    width, kv_heads = layer.head_dim // 2, layer.num_kv_heads
    q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
    half = kv_heads // 2
    per_head = b.op("Reshape", v, b.const([0, 0, kv_heads, width], "v_diff_heads", "int64"))
    first, second = (
        b.op("Gather", per_head, b.const([offset + j % half for j in range(kv_heads)], f"v_half{n}", "int64"), axis=2)
        for n, offset in ((1, 0), (2, half))
    )
    values = b.op("Concat", first, second, axis=-1, name="v_halves")
    flat = b.op("Reshape", values, b.const([0, 0, kv_heads * 2 * width], "v_diff_flat", "int64"))
    q = _padded_heads(lc, q, lc.dims.num_heads, width, table, "q")
    return q, _padded_heads(lc, k, kv_heads, width, table, "k"), flat


def differential_output(lc: LayerContext, out: ir.Value) -> ir.Value:
    """The GQA output [B,S,Nq*2D] -> [B,S,Nq*D]: (heads h - lambda heads h + Nq/2), normed, scaled."""
    b, heads, head_dim = lc.b, lc.dims.num_heads, lc.layer.head_dim
    per_head = b.op("Reshape", out, b.const([0, 0, heads, head_dim], "diff_out_heads", "int64"))
    split = b.const([heads // 2, heads // 2], "diff_head_split", "int64")
    first, second = b.op_multi("Split", per_head, split, axis=2, outputs=2, name="diff_head_pairs")
    lam, lam_init = _lambdas(lc)
    mixed = b.op(
        "Sub", first, b.op("Mul", second, float_scalar(b, lam, lc.params.dtype, "diff_lambda")), name="differential"
    )
    ones = b.const(np.ones(head_dim, NUMPY_DTYPES[lc.params.dtype]), "diff_norm_ones")
    normed = b.op(
        "SimplifiedLayerNormalization", mixed, ones, axis=-1, epsilon=lc.dims.rms_eps, stash_type=1, name="diff_norm"
    )
    scaled = b.op("Mul", normed, float_scalar(b, 1.0 - lam_init, lc.params.dtype, "diff_out_scale"), name="diff_scale")
    return b.op("Reshape", scaled, b.const([0, 0, heads * head_dim // 2], "diff_out_flat", "int64"))


def _lambdas(lc: LayerContext) -> tuple[float, float]:
    """(lambda, lambda_init) of this layer, from its lambda_q1 / k1 / q2 / k2 parameters."""
    module = lc.spec.differential_attention
    read = {n: lc.params.store.read(lc.name(f"{module}.{n}", suffix="")).astype(np.float32) for n in _LAMBDAS}
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * lc.i)
    pair = (np.exp(np.sum(read[f"lambda_q{j}"] * read[f"lambda_k{j}"], dtype=np.float32)) for j in (1, 2))
    return float(next(pair) - next(pair) + np.float32(lam_init)), lam_init


_LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
