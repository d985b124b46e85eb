"""A learned square table of position embeddings resampled to each image's patch grid (Qwen3-VL /
Qwen3.5 vision towers), computed per patch in the graph (docs/multimodal.md §11).

The table holds side x side rows; an image of h x w patches reads it bilinearly with
align_corners: patch row r samples the table at r·(side - 1)/max(h - 1, 1) (columns alike), so
the corners of every image map to the table's corners. Each patch's embedding is the weighted
sum of its four neighbours (taps past the edge clamp to it), in HF's float32 arithmetic order.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.patch_grid import PatchGrid

F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64


def _axis(b: GraphBuilder, index: ir.Value, size: ir.Value, side: int, name: str) -> tuple[ir.Value, ir.Value]:
    """Taps [P, 2] int64 and weights [P, 2] float32 along one axis."""
    with b.scope(name):
        span = b.op("Max", b.op("Sub", size, b.const(1, "one", "int64")), b.const(1, "floor", "int64"))
        scaled = b.op("Mul", b.op("Cast", index, to=F32), b.const(float(side - 1), "side", "float32"))
        src = b.op("Div", scaled, b.op("Cast", span, to=F32))
        low = b.op("Floor", src)
        frac = b.op("Sub", src, low)
        last = b.const(1, "col", "int64")
        offsets = b.const([0.0, 1.0], "offsets", "float32")
        distance = b.op("Abs", b.op("Sub", b.op("Unsqueeze", frac, last), offsets))  # [P, 2]
        weights = b.op("Relu", b.op("Sub", b.const(1.0, "unit", "float32"), distance))
        taps = b.op("Add", b.op("Unsqueeze", b.op("Cast", low, to=I64), last), b.const([0, 1], "steps", "int64"))
        taps = b.op("Clip", taps, b.const(0, "lo", "int64"), b.const(side - 1, "hi", "int64"))
    return taps, weights


def interpolated_positions(
    b: GraphBuilder, table: ir.Value, side: int, grid: PatchGrid, dtype: ir.DataType
) -> ir.Value:
    """[P, hidden]: each patch's bilinear sample of the side x side table [side², hidden]."""
    with b.scope("pos_embed"):
        h_taps, h_weights = _axis(b, grid.h, grid.height, side, "rows")
        w_taps, w_weights = _axis(b, grid.w, grid.width, side, "cols")
        two, one = b.const([2], "ax2", "int64"), b.const([1], "ax1", "int64")
        rows = b.op("Mul", b.op("Unsqueeze", h_taps, two), b.const(side, "side_rows", "int64"))
        index = b.op("Add", rows, b.op("Unsqueeze", w_taps, one))  # [P, 2, 2]
        weight = b.op("Mul", b.op("Unsqueeze", h_weights, two), b.op("Unsqueeze", w_weights, one))
        four = b.const([-1, 4], "taps", "int64")
        index, weight = b.op("Reshape", index, four), b.op("Reshape", weight, four)
        if dtype != F32:
            weight = b.op("Cast", weight, to=dtype)
        picked = b.op("Gather", table, index)  # [P, 4, hidden]
        weighted = b.op("Mul", picked, b.op("Unsqueeze", weight, b.const([-1], "last", "int64")))
        return b.op("ReduceSum", weighted, one, keepdims=0)
