"""DeepSeek-V4's compressed-KV layers (CSA / HCA; docs/coverage.md, section "deepseek_v4"), with plain ops.

What the modeling code does: beside the sliding K = V keys, one compressed key per complete window of m =
compress_rate tokens: the compressor's rows c = kv_proj(x), z = gate_proj(x) + position_bias[j] (j the token's
place in its window), the key `kv_norm(sum_j softmax_j(z_j) * c_j)` (the softmax per channel over the window),
rotated by the "compress" rope at the window's first position, concatenated onto the sliding keys of the same
softmax (sinks included) and visible to a query at position p once its window is complete (w < (p + 1) // m).
CSA's rows are 2 x head_dim wide, two series: key w pools window w - 1's first half with window w's second half
(2m slots; window 0's first half empty), and its lightning indexer keeps the top index_topk keys per query: while
a query's complete windows number at most index_topk it keeps them all, so the package is exact within
index_topk x m tokens (its context capped there, DeepSeek-V3.2's policy; the indexer's weights are not read).

How the package computes it: HF keeps the pooled keys in a second cache with carried buffers; here each token's
rows are cached and every key recomputed each step. The layer's cache holds, per token, [its rotated key | the
compressor's kv rows | its gate rows] as 1 + 2 x series heads of head_dim (both the key and the value cache: the
value of a K = V layer is free, and genai shapes the two alike), written at each row's slots (ScatterND; the
compact layout, slot = position, so a right-padded row equals its unpadded run); the windows are binned by slot.
Attention is plain ops: one MatMul over [sliding keys (window mask) | pooled keys (complete-window mask)], the
sinks as an extra softmax column, the same rows as values; the output then rotated back (shared_kv_attention).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.gqa_inputs import attention_sinks
from gqa_export.graph.masks import MaskKind, MaskValues, mask_values
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.shared_kv_attention import Table, rotate_trailing, shared_kv_qkv
from gqa_export.graph.standard import LayerKV
from gqa_export.model.dims import ModelDims

INT64 = ir.DataType.INT64


def _i64(b: GraphBuilder, values: int | list[int], name: str) -> ir.Value:
    return b.const(values, name, "int64")


def _scatter_indices(b: GraphBuilder, x: ir.Value, write_index: ir.Value, heads: int) -> ir.Value:
    """[B, heads, S, 3]: (row, head, write_index[row] + s) for ScatterND into [B, heads, slots, D]."""
    zero, one = _i64(b, 0, "s_zero"), _i64(b, 1, "s_one")
    batch = b.op("Squeeze", b.op("Shape", x, start=0, end=1), _i64(b, [0], "s_axis0"))
    steps = b.op("Squeeze", b.op("Shape", x, start=1, end=2), _i64(b, [0], "s_axis0"))
    rows = b.op("Reshape", b.op("Range", zero, batch, one), _i64(b, [-1, 1, 1, 1], "rows_shape"))
    slots = b.op("Add", b.op("Reshape", write_index, _i64(b, [-1, 1, 1, 1], "rows_shape")),
                 b.op("Reshape", b.op("Range", zero, steps, one), _i64(b, [1, 1, -1, 1], "steps_shape")))  # fmt: skip
    head = _i64(b, np.arange(heads, dtype=np.int64).reshape(1, heads, 1, 1).tolist(), f"cache_heads{heads}")
    shape = b.op("Shape", b.op("Add", b.op("Add", rows, slots), head))  # [B, heads, S, 1]
    parts = [b.op("Expand", v, shape) for v in (rows, head, slots)]
    return b.op("Concat", *parts, axis=-1, name="write_indices")


def _pooled(lc: LayerContext, rows: ir.Value, gates: ir.Value, total: ir.Value, caches: Table) -> ir.Value:
    """[B, W, D]: the compressed keys of the W = T // m complete windows of the cached rows [B, T, series * D]."""
    b, dims, params, layer = lc.b, lc.dims, lc.params, lc.layer
    shapes, names = dims.shared_kv, lc.spec.shared_kv_attention
    assert shapes is not None and names is not None
    rate, two, width = shapes.rates[lc.i], shapes.overlapping[lc.i], layer.head_dim
    full = b.op("Mul", b.op("Div", total, _i64(b, [rate], f"rate{rate}")), _i64(b, [rate], f"rate{rate}"))
    axis1, zero = _i64(b, [1], "axis1"), _i64(b, [0], "start0")
    windows = _i64(b, [0, -1, rate, shapes.series(lc.i) * width], f"windows{rate}x{shapes.series(lc.i)}")
    rows = b.op("Reshape", b.op("Slice", rows, zero, full, axis1), windows)  # [B, W, m, series * D]
    bias_name = lc.name(f"{names.compressor}.position_bias", "")
    gates = b.op("Add", b.op("Reshape", b.op("Slice", gates, zero, full, axis1), windows),
                 b.initializer(bias_name, params.derived(bias_name, lambda a: a)))  # fmt: skip
    if two:  # CSA: window w pools w - 1's first series with w's second over 2m slots (w = 0: the second alone)
        rows, gates = overlapped(b, rows, gates, width, params.dtype)
    weights = b.op("Softmax", gates, axis=2, name="window_softmax")
    summed = b.op("ReduceSum", b.op("Mul", rows, weights), _i64(b, [2], "slot_axis"), keepdims=0)  # [B, W, D]
    normed = normalize(b, summed, lc.name(f"{names.compressor}.kv_norm"), params, dims, "compressor_kv_norm", 0)
    cos_cache, sin_cache = caches  # rotated at each window's first position, w * m
    starts = b.op("Mul", b.op("Range", _i64(b, 0, "w0"), b.op("Squeeze", b.op("Shape", rows, start=1, end=2),
                  zero), _i64(b, 1, "w1")), _i64(b, rate, f"rate_scalar{rate}"))  # fmt: skip
    axes = _i64(b, [0, 2], "window_table_axes")
    table = (b.op("Unsqueeze", b.op("Gather", cos_cache, starts), axes),
             b.op("Unsqueeze", b.op("Gather", sin_cache, starts), axes))  # fmt: skip
    keys = rotate_trailing(lc, b.op("Unsqueeze", normed, _i64(b, [2], "head_axis")), table, "compressed_rope")
    return b.op("Squeeze", keys, _i64(b, [2], "head_axis"), name="compressed_keys")


def overlapped(
    b: GraphBuilder, rows: ir.Value, gates: ir.Value, width: int, dtype: ir.DataType
) -> tuple[ir.Value, ir.Value]:
    """CSA's two series [B, W, m, 2D] -> [B, W, 2m, D]: window w - 1's first half (window 0: zero rows, -inf
    gates, weight 0) then window w's second half."""
    axis1, zero = _i64(b, [1], "axis1"), _i64(b, [0], "start0")
    halves = _i64(b, [width, width], "series_split")
    first_rows, second_rows = b.op_multi("Split", rows, halves, axis=-1, outputs=2)
    first_gates, second_gates = b.op_multi("Split", gates, halves, axis=-1, outputs=2)
    count = b.op("Shape", rows, start=1, end=2)

    def previous(value: ir.Value, fill: float, tag: str) -> ir.Value:
        one_window = b.op("Shape", b.op("Slice", value, zero, _i64(b, [1], "one_window"), axis1))
        empty = b.op("Expand", b.const(np.asarray(fill, NUMPY_DTYPES[dtype]), f"{tag}_fill"), one_window)
        return b.op("Slice", b.op("Concat", empty, value, axis=1), zero, count, axis1, name=f"{tag}_previous")

    rows = b.op("Concat", previous(first_rows, 0.0, "rows"), second_rows, axis=2)
    return rows, b.op("Concat", previous(first_gates, -np.inf, "gates"), second_gates, axis=2)


def complete_windows(b: GraphBuilder, positions: ir.Value, rate: int) -> ir.Value:
    """[B, S]: how many windows of `rate` tokens are complete at each position, (p + 1) // rate."""
    return b.op("Div", b.op("Add", positions, _i64(b, 1, "plus_one")), _i64(b, rate, f"rate_scalar{rate}"))


def compressed_attention(
    lc: LayerContext,
    x: ir.Value,
    past: tuple[ir.Value, ir.Value],
    table: Table,
    caches: Table,
    masks: MaskValues,
    window_bias: ir.Value,
) -> tuple[ir.Value, LayerKV]:
    """(output [B, S, N*D] before the rotation back, the layer's KV): the rows cached, every key recomputed."""
    b, dims, params, layer = lc.b, lc.dims, lc.params, lc.layer
    shapes, names = dims.shared_kv, lc.spec.shared_kv_attention
    assert shapes is not None and names is not None and masks.write_index is not None
    heads, width, series = layer.num_kv_heads, layer.head_dim, shapes.series(lc.i)
    q, kv, _ = shared_kv_qkv(lc, x, table)
    with b.scope("compressor"):
        rows = linear(lc, x, [f"{names.compressor}.kv_proj"], None, "kv_proj")
        gates = linear(lc, x, [f"{names.compressor}.gate_proj"], None, "gate_proj")
    packed = b.op("Concat", kv, rows, gates, axis=-1)
    packed = b.op(
        "Transpose", b.op("Reshape", packed, _i64(b, [0, 0, heads, width], f"packed{heads}")), perm=[0, 2, 1, 3]
    )
    indices = _scatter_indices(b, x, masks.write_index, heads)
    present_k = b.op("ScatterND", past[0], indices, packed, name="k_write")
    present_v = b.op("ScatterND", past[1], indices, packed, name="v_write")
    slots = b.op("Slice", present_k, _i64(b, [0], "start0"), masks.total_length, _i64(b, [2], "slot_axis2"))
    key, cached_rows, cached_gates = b.op_multi(
        "Split", slots, _i64(b, [1, series, series], f"cache_split{series}"), axis=1, outputs=3
    )

    def flat_rows(value: ir.Value) -> ir.Value:  # [B, series, T, D] -> [B, T, series * D]
        return b.op(
            "Reshape", b.op("Transpose", value, perm=[0, 2, 1, 3]), _i64(b, [0, 0, series * width], "rows_flat")
        )

    pooled = _pooled(lc, flat_rows(cached_rows), flat_rows(cached_gates), masks.total_length, caches)
    keys = b.op("Concat", key, b.op("Unsqueeze", pooled, _i64(b, [1], "axis1")), axis=2, name="keys")  # [B,1,K,D]
    query = b.op("Transpose", b.op("Reshape", q, _i64(b, [0, 0, dims.num_heads, width], "q_heads")), perm=[0, 2, 1, 3])
    scale = b.const(np.asarray(dims.scale(layer), NUMPY_DTYPES[params.dtype]), "score_scale")
    scores = b.op("Mul", b.op("MatMul", query, b.op("Transpose", keys, perm=[0, 1, 3, 2])), scale)  # [B,N,S,K]
    scores = b.op("Add", scores, b.op("Concat", window_bias, _visible(lc, masks, pooled), axis=-1))
    sinks = attention_sinks(lc)
    assert sinks is not None, "DeepSeek-V4's attention has a sink per head"
    column_shape = b.op("Concat", b.op("Shape", scores, start=0, end=3), _i64(b, [1], "one_column"), axis=0)
    column = b.op("Expand", b.op("Reshape", sinks, _i64(b, [1, -1, 1, 1], "sink_column")), column_shape)
    probs = b.op("Softmax", b.op("Concat", scores, column, axis=-1), axis=-1, name="probs_with_sink")
    probs = b.op("Slice", probs, _i64(b, [0], "start0"), _i64(b, [-1], "drop_sink"), _i64(b, [-1], "last_axis"))
    out = b.op("Transpose", b.op("MatMul", probs, keys), perm=[0, 2, 1, 3])  # [B, S, N, D]
    out = b.op("Reshape", out, _i64(b, [0, 0, dims.num_heads * width], "out_flat"), name="attention_out")
    return out, LayerKV(present_k, present_v, slots, slots)


def _visible(lc: LayerContext, masks: MaskValues, pooled: ir.Value) -> ir.Value:
    """[B, 1, S, W] additive: 0 where the query at position p sees pooled key w (w < (p + 1) // m), else lowest."""
    b, params = lc.b, lc.params
    rate = lc.dims.shared_kv.rates[lc.i]  # type: ignore[union-attr]
    seen = complete_windows(b, masks.positions, rate)
    count = b.op("Squeeze", b.op("Shape", pooled, start=1, end=2), _i64(b, [0], "s_axis0"))
    windows = b.op("Range", _i64(b, 0, "w0"), count, _i64(b, 1, "w1"))  # [W]
    allowed = b.op("Less", windows, b.op("Unsqueeze", seen, _i64(b, [1, 3], "bias_axes")))  # [B, 1, S, W]
    np_dtype = NUMPY_DTYPES[params.dtype]
    lowest = {ir.DataType.FLOAT: np.finfo(np.float32).min, ir.DataType.FLOAT16: np.finfo(np.float16).min}
    lowest = np.asarray(lowest.get(params.dtype, -3.3e38), np.float32).astype(np_dtype)  # as graph/masks.py
    return b.op("Where", allowed, b.const(np.zeros((), np_dtype), "bias_zero"),
                b.const(lowest, "window_lowest"), name="complete_windows")  # fmt: skip


def compressed_masks(
    b: GraphBuilder, dims: ModelDims, input_ids: ir.Value, attention_mask: ir.Value, dtype: ir.DataType
) -> MaskValues | None:
    """The compact layout's positions, write slots and window biases, where some layer is compressed."""
    shapes = dims.shared_kv
    if shapes is None or not any(shapes.rates):
        return None
    kinds = {MaskKind(layer.window, False) for layer in dims.layers if shapes.rates[layer.index]}
    return mask_values(b, input_ids, attention_mask, "compact", kinds, (), dtype)


def is_compressed(lc: LayerContext) -> bool:
    shapes = lc.dims.shared_kv
    return shapes is not None and bool(shapes.rates[lc.i])
