"""Token merging by bipartite soft matching (ToMe), as VideoChat-Flash's tome16_mlp_hd64 projector runs it on an
image's tower tokens (docs/coverage.md §36): rounds that each remove r tokens (at most half), the counts fixed by the
grid (`VideoTowerDims.merges`).

A round's metric is the tokens' channels averaged over the tower's heads' slices and L2-normalized; even tokens (a)
score against odd ones (b) by cosine; each a takes its best b (first on ties); the a's sorted by that score, best
first: the r best are added into their b, the rest kept in that order. Out: the kept a's, then the b's, each a
weighted average of the tokens merged into it by their sizes (how many original tokens each holds)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.tubelet_vit import VideoTowerDims
from gqa_export.graph.params import NUMPY_DTYPES

F32 = ir.DataType.FLOAT
BEST_FIRST = 1  # TopK's `largest`: the a tokens in their best match's descending order


def _every_other(b: GraphBuilder, x: ir.Value, start: int) -> ir.Value:
    """x[:, start::2] (tokens on axis 1)."""
    c = b.const
    return b.op("Slice", x, c([start], f"from{start}", "int64"), c([2**62], "to_end", "int64"), c([1], "ax1", "int64"),
                c([2], "step2", "int64"))  # fmt: skip


def _rows(b: GraphBuilder, data: ir.Value, index: ir.Value) -> ir.Value:
    """data[n, index[n, j], :] for every channel: GatherElements over axis 1 with the index broadcast."""
    return b.op("GatherElements", data, _broadcast(b, index, data), axis=1)


def _broadcast(b: GraphBuilder, index: ir.Value, like: ir.Value) -> ir.Value:
    """[N, k] token index -> [N, k, channels of `like`]."""
    shape = b.op("Concat", b.op("Shape", index), b.op("Shape", like, start=2), axis=0)
    return b.op("Expand", b.op("Unsqueeze", index, b.const([2], "ax2", "int64")), shape)


def merge_round(
    b: GraphBuilder, x: ir.Value, size: ir.Value | None, r: int, dims: VideoTowerDims, dtype: ir.DataType
) -> tuple[ir.Value, ir.Value]:
    """One ToMe round over x [N, p, d] with token sizes [N, p, 1] (None: all 1): p - r tokens out."""
    c = b.const
    heads = c([0, 0, dims.heads, dims.hidden // dims.heads], "head_split", "int64")
    metric = b.op("ReduceMean", b.op("Reshape", x, heads), c([2], "heads_axis", "int64"), keepdims=0)
    metric = b.op("Div", metric, b.op("ReduceL2", metric, c([-1], "last", "int64"), keepdims=1))
    scores = b.op("MatMul", _every_other(b, metric, 0), b.op("Transpose", _every_other(b, metric, 1), perm=[0, 2, 1]))
    best = b.op("ReduceMax", scores, c([-1], "last", "int64"), keepdims=0)  # [N, a]
    partner = b.op("ArgMax", scores, axis=-1, keepdims=0)  # [N, a]
    a_count = b.op("Shape", best, start=1, end=2)
    _, order = b.op_multi("TopK", best, a_count, axis=-1, largest=BEST_FIRST, sorted=1, outputs=2)
    r_at = c([r], "r", "int64")
    merged = b.op("Slice", order, c([0], "zero", "int64"), r_at, c([1], "ax1", "int64"))
    kept = b.op("Slice", order, r_at, c([2**62], "to_end", "int64"), c([1], "ax1", "int64"))
    into = b.op("GatherElements", partner, merged, axis=1)
    if size is None:
        ones = b.op("Concat", b.op("Shape", x, end=2), c([1], "one", "int64"), axis=0)
        size = b.op("Expand", c(np.ones((1, 1, 1), NUMPY_DTYPES[dtype]), "ones"), ones)
    weighted = b.op("Concat", b.op("Mul", x, size), size, axis=-1)
    if dtype != F32:  # onnxruntime's CPU ScatterElements adds float32 only: the sums are taken in float32
        weighted = b.op("Cast", weighted, to=F32)
    a, dst = _every_other(b, weighted, 0), _every_other(b, weighted, 1)
    dst = b.op("ScatterElements", dst, _broadcast(b, into, dst), _rows(b, a, merged), axis=1, reduction="add")
    out = b.op("Concat", _rows(b, a, kept), dst, axis=1)
    out = out if dtype == F32 else b.op("Cast", out, to=dtype)
    total, summed = b.op_multi("Split", out, c([dims.hidden, 1], "value_size", "int64"), axis=-1, outputs=2)
    return b.op("Div", total, summed), summed
