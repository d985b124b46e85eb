"""A learned square table of position embeddings resized to each image's patch grid the way a
SigLIP2 NaFlex tower resizes it (LFM2-VL, docs/multimodal.md §14.1), computed in the graph.

The table holds G x G rows. For an image of h x w patches HF resizes it with
`interpolate(mode="bilinear", align_corners=False, antialias=True)`: along an axis of n outputs
output i sits at source coordinate c = (i + 0.5)·G/n - 0.5 and takes the triangle weights
max(0, 1 - |s - c| / support) of the sources s, support = max(G/n, 1) (wider than one source when
the table shrinks: the antialiasing), normalised to sum 1. A patch's embedding is the outer
product of its row's and its column's weights applied to the whole table. Patches of the padding
(past h·w) read position (0, 0), as HF's do; their rows are masked out of attention and dropped.
Arithmetic in float32 in HF's order.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder

F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64
# a shrinking axis widens the triangle to the scale (antialiasing, as HF resizes); False: plain
# bilinear whatever the scale (a mutant the tests keep)
ANTIALIAS = True


def resized_positions(
    b: GraphBuilder, table: ir.Value, side: int, sizes: ir.Value, patches: ir.Value, dtype: ir.DataType
) -> ir.Value:
    """[N, P, hidden]: table [side², hidden] resized to each image's grid; sizes [N, 2] int64 (rows,
    columns in patches), patches: the padded patch count P (int64 [1])."""
    with b.scope("position_embedding"):
        c = b.const
        grid = b.op("Unsqueeze", b.op("Cast", sizes, to=F32), c([1], "ax1", "int64"))  # [N, 1, 2]
        rows, cols = b.op_multi("Split", grid, c([1, 1], "split", "int64"), axis=-1, outputs=2, name="hw")
        count = b.op("Squeeze", patches, c([0], "ax0", "int64"))
        position = b.op("Cast", b.op("Range", c(0, "zero", "int64"), count, c(1, "one", "int64")), to=F32)
        position = b.op("Unsqueeze", position, c([0, 2], "ax02", "int64"))  # [1, P, 1]
        row = b.op("Floor", b.op("Div", position, cols))
        index = b.op("Concat", row, b.op("Sub", position, b.op("Mul", row, cols)), axis=-1)  # [N, P, 2]
        inside = b.op("Less", position, b.op("Mul", rows, cols))
        index = b.op("Mul", index, b.op("Cast", inside, to=F32))
        scale = b.op("Div", c(float(side), "side", "float32"), grid)  # [N, 1, 2]
        support = b.op("Max", scale, c(1.0, "unit", "float32")) if ANTIALIAS else c(1.0, "unit", "float32")
        center = b.op(
            "Sub", b.op("Mul", b.op("Add", index, c(0.5, "half", "float32")), scale), c(0.5, "half_b", "float32")
        )
        last = c([-1], "last", "int64")
        source = c([float(s) for s in range(side)], "source", "float32")
        distance = b.op("Abs", b.op("Sub", source, b.op("Unsqueeze", center, last)))  # [N, P, 2, G]
        weights = b.op(
            "Relu", b.op("Sub", c(1.0, "one_f", "float32"), b.op("Div", distance, b.op("Unsqueeze", support, last)))
        )
        weights = b.op("Div", weights, b.op("ReduceSum", weights, last, keepdims=1))
        w_rows, w_cols = b.op_multi("Split", weights, c([1, 1], "split_w", "int64"), axis=2, outputs=2, name="axes")
        outer = b.op("Mul", b.op("Transpose", w_rows, perm=[0, 1, 3, 2]), w_cols)  # [N, P, G, G]
        flat = b.op("Reshape", outer, c([0, 0, side * side], "flat", "int64"))
        if table.type is not None and table.type.dtype != F32:  # HF resizes the float32 table
            table = b.op("Cast", table, to=F32)
        resized = b.op("MatMul", flat, table)
        return resized if dtype == F32 else b.op("Cast", resized, to=dtype)
