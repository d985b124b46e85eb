"""Inkling2's attention inputs (docs/coverage.md's Inkling section, Inkling2): Inkling's relative bias and residual
convolutions with L2-clipped heads and a sink logit per token.

- queries: q_proj's heads times a learned [Nq, D] scale, each head vector scaled down to the config's
  qk_l2_clip_threshold where its L2 norm is larger (x * min(threshold / (|x| + 1e-6), 1), in float32), the
  full layers' then times the log scale; keys (after their residual convolution) clipped the same way without
  a scale; values (after theirs) RMS-normed without a weight;
- relative states: clipped the same way after their own learned [Nq, d_rel] scale, at rel_l2_clip_threshold;
  the full layers' log scale goes on the bias, the same product;
- the sink: `sink_proj`(x) [B,S,Nq], one logit per token and head whose value is zero. GroupQueryAttention's
  head_sink is one logit per head, but softmax([scores, s]) = softmax([scores - s, 0]): the bias minus the
  sink with a zero head_sink is the per-token sink (probed on the CPU kernel, docs/coverage.md);
- a full layer's queries, keys and values come from three inputs (graph/block_residuals.py): `x` is then
  (query input, key input, value input), the bias, the sink and the output gate reading the query input.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, head_norm, linear
from gqa_export.graph.params import NUMPY_DTYPES, WIDER_THAN_IO_META, Params
from gqa_export.graph.relative_bias import RelativeDistances, relative_bias
from gqa_export.graph.residual_convs import convolved_keys_values

Inputs = ir.Value | tuple[ir.Value, ir.Value, ir.Value]


def clipped_attention_inputs(
    lc: LayerContext, x: Inputs, distances: RelativeDistances
) -> tuple[tuple[ir.Value, ir.Value, ir.Value], ir.Value, ir.Value]:
    """((query, key, value) [B,S,heads*D], the attention_bias [B,Nq,S,T] (relative bias minus the sink), a zero
    head_sink [Nq]) for GroupQueryAttention."""
    L, b, layer = lc.spec.layer, lc.b, lc.layer
    names = lc.spec.relative_bias.clipped  # type: ignore[union-attr]
    assert names is not None
    heads, kv_heads, d = lc.dims.num_heads, layer.num_kv_heads, layer.head_dim
    xq, xk, xv = x if isinstance(x, tuple) else (x, x, x)
    assert lc.dims.relative is not None
    clip, relative_clip = lc.dims.relative.clips
    q = linear(lc, xq, [L.q], None, "q_proj")
    k = linear(lc, xk, [L.k], None, "k_proj")
    v = linear(lc, xv, [L.v], None, "v_proj")
    k, v = convolved_keys_values(lc, k, v, (xk, xv))
    scale = distances.log_scale if layer.window <= 0 else None
    q = _clipped(lc, _heads(lc, q, heads, d, "q"), clip, "q", lc.name(names.query_scale, suffix=""))
    if scale is not None:  # [B,S,1] -> [B,S,1,1]
        q = b.op("Mul", q, b.op("Unsqueeze", scale, b.const([3], "head_dim_axis", "int64")), name="query_log_scale")
    k = _clipped(lc, _heads(lc, k, kv_heads, d, "k"), clip, "k")
    v = head_norm(lc, _heads(lc, v, kv_heads, d, "v"), None, "v_norm", kv_heads)
    q, k, v = (b.op("Reshape", t, b.const([0, 0, -1], "flat", "int64"), name=f"{n}_flat") for t, n in
               ((q, "q"), (k, "k"), (v, "v")))  # fmt: skip
    state_scale = lc.name(names.relative_scale, suffix="")
    bias = relative_bias(
        lc, xq, distances, scale, lambda states: _clipped(lc, states, relative_clip, "relative", state_scale)
    )
    with b.scope("sink"):
        sink = linear(lc, xq, [names.sink], None, "sink_proj")  # [B,S,Nq]
        sink = b.op("Unsqueeze", b.op("Transpose", sink, perm=[0, 2, 1]), b.const([3], "key_axis", "int64"))
        bias = b.op("Sub", bias, sink, name="bias_minus_sink")  # [B,Nq,S,T]
    zeros = b.const(np.zeros(heads, NUMPY_DTYPES[lc.params.dtype]), f"zero_head_sink{heads}")
    return (q, k, v), bias, zeros


def _heads(lc: LayerContext, x: ir.Value, heads: int, d: int, tag: str) -> ir.Value:
    return lc.b.op("Reshape", x, lc.b.const([0, 0, heads, d], f"{tag}_heads", "int64"), name=f"{tag}_per_head")


def _clipped(lc: LayerContext, x: ir.Value, threshold: float, tag: str, scale: str | None = None) -> ir.Value:
    """x [B,S,heads,W] (times the stored [heads, W] `scale`), each head vector times
    min(threshold / (|x| + 1e-6), 1), in float32 as HF."""
    b, params = lc.b, lc.params
    wide = Params(params.store, ir.DataType.FLOAT)  # float32 whatever the graph's dtype, as HF computes it

    def float32(value: ir.Value) -> ir.Value:
        value.meta[WIDER_THAN_IO_META] = True
        return value

    with b.scope(f"{tag}_clip"):
        y = x if params.dtype == ir.DataType.FLOAT else b.op("Cast", x, to=ir.DataType.FLOAT)
        if scale is not None:
            y = b.op("Mul", y, float32(b.initializer(scale, wide.derived(scale, lambda w: w))), name="scaled")
        norm = b.op("ReduceL2", y, b.const([-1], "last", "int64"), keepdims=1, name="l2")
        eps = float32(b.const(np.asarray(1e-6, np.float32), "eps"))
        bound = float32(b.const(np.asarray(threshold, np.float32), "threshold"))
        factor = b.op("Min", b.op("Div", bound, b.op("Add", norm, eps)), float32(b.const(np.float32(1.0), "one")))
        y = b.op("Mul", y, factor, name="clipped")
        return y if params.dtype == ir.DataType.FLOAT else b.op("Cast", y, to=params.dtype)
