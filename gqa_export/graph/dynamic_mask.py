"""Doge's dynamic mask attention: every key k of kv head j adds dt_jk = exp(A_j softplus(dt_proj(v_k))_j)
to its scores (ArchSpec.dynamic_key_bias; docs/coverage.md §13), where v_k is the key's value over all
kv heads.

A bias that depends on each cached key is not a GroupQueryAttention input that right-padded batches
and the shared buffer can index, so the key's factor exp(dt_jk) rides in its value instead: the cache
holds exp(dt_jk) [v_jk | 1 | 0 ...] (heads D + 16 wide: GQA's head sizes are multiples of 16 with
rotary; q and k zero-padded, RoPE on the first D channels). Attention then returns, per query head,
sum_k p_k exp(dt_k) [v_k | 1] with p the unbiased softmax, and the first D channels divided by channel D
are sum_k exp(s_k + dt_k) v_k / sum_k exp(s_k + dt_k): the biased softmax's output exactly (its own
normalization cancels). transformers also keeps only the top keep_window_size keys by dt once a query
sees more; the package's context is capped there (model/dims.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, head_norm, linear
from gqa_export.graph.builder import NUMPY_DTYPES, GraphBuilder
from gqa_export.graph.rotary import rotated_if
from gqa_export.graph.value_heads import zero_padded_heads

EXTRA = 16  # the value's ones channel and its zero padding: GQA head sizes with rotary are multiples of 16


def _heads(b: GraphBuilder, x: ir.Value, heads: int, width: int, tag: str) -> ir.Value:
    return b.op("Reshape", x, b.const([0, 0, heads, width], f"{tag}_dyn_heads", "int64"))


def dynamic_qkv(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """GroupQueryAttention's q, k (head-normed, rotated by `table` where given, zero-padded) and v
    (exp(dt) [v | 1 | 0])."""
    L, b, layer, dims = lc.spec.layer, lc.b, lc.layer, lc.dims
    width, kv_heads = layer.head_dim - EXTRA, layer.num_kv_heads
    q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
    q = head_norm(lc, _heads(b, q, dims.num_heads, width, "q"), L.q_norm, "q_norm", dims.num_heads)
    k = head_norm(lc, _heads(b, k, kv_heads, width, "k"), L.k_norm, "k_norm", kv_heads)
    rope = lc.dims.ropes.get(layer.rope) if layer.rope is not None else None
    q, k = rotated_if(b, q, table, rope, width, "q"), rotated_if(b, k, table, rope, width, "k")
    module = lc.spec.dynamic_key_bias
    dt = linear(lc, v, [f"{module}.dt_proj"], None, "dt_proj")  # [B,S,Nkv]
    a = b.initializer(lc.name(f"{module}.A", suffix=""), lc.params.vector([lc.name(f"{module}.A", suffix="")]))
    dt = b.op("Exp", b.op("Mul", a, b.op("Softplus", dt)), name="dt")
    factor = b.op("Unsqueeze", b.op("Exp", dt, name="key_factor"), b.const([-1], "dyn_axis", "int64"))
    one = np.zeros(width + EXTRA, NUMPY_DTYPES[lc.params.dtype])
    one[width] = 1
    padded = b.op("Pad", _heads(b, v, kv_heads, width, "v"), b.const([0, 0, 0, 0, 0, 0, 0, EXTRA], "dyn_pads", "int64"))
    ones = b.op("Add", padded, b.const(one, "dyn_ones_channel"), name="v_ones")
    values = b.op("Mul", ones, factor, name="v_key_factor")
    flat_v = b.op("Reshape", values, b.const([0, 0, kv_heads * (width + EXTRA)], "v_dyn_flat", "int64"))
    q = zero_padded_heads(b, q, dims.num_heads, width, EXTRA, "q", "dyn")
    return q, zero_padded_heads(b, k, kv_heads, width, EXTRA, "k", "dyn"), flat_v


def dynamic_output(lc: LayerContext, out: ir.Value) -> ir.Value:
    """The GQA output [B,S,Nq*(D+16)] -> [B,S,Nq*D]: each head's first D channels over its channel D."""
    b, heads, head_dim = lc.b, lc.dims.num_heads, lc.layer.head_dim
    width = head_dim - EXTRA
    per_head = _heads(b, out, heads, head_dim, "out")
    axis = b.const([-1], "dyn_axis", "int64")
    start, mid, end = (b.const([n], f"dyn_at{n}", "int64") for n in (0, width, width + 1))
    weighted = b.op("Slice", per_head, start, mid, axis, name="dyn_weighted")
    total = b.op("Slice", per_head, mid, end, axis, name="dyn_total")
    normalized = b.op("Div", weighted, total, name="dyn_normalized")
    return b.op("Reshape", normalized, b.const([0, 0, heads * width], "dyn_out_flat", "int64"))
