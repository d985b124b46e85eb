"""What the two HD-transform towers (Phi-4-multimodal's hd_crops.py, Phi-3-vision's clip_hd.py) share in the one
Gather that lays out their image tokens: each token's image and place in it from the images' token counts, and
the rows the Gather reads (crop rows of every image, then the sub and global separator rows)."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder

I64 = ir.DataType.INT64


def token_places(b: GraphBuilder, count: ir.Value) -> tuple[ir.Value, ir.Value]:
    """[N] token counts per image -> ([T] each token's image, [T] its place in that image), T = sum(count)."""
    c = b.const
    ends = b.op("CumSum", count, c(0, "ax_sum", "int64"))
    total = b.op("ReduceSum", count, c([0], "r6", "int64"), keepdims=1)
    last = b.op("Squeeze", total, c([0], "sq", "int64"))
    t = b.op("Range", c(0, "zero_e", "int64"), last, c(1, "one_d", "int64"))
    done = b.op("LessOrEqual", b.op("Unsqueeze", ends, c([0], "ax0b", "int64")),
                b.op("Unsqueeze", t, c([1], "ax_t", "int64")))  # fmt: skip  # [T, N]
    image = b.op("ReduceSum", b.op("Cast", done, to=I64), c([1], "r7", "int64"), keepdims=0)
    return image, b.op("Sub", t, b.op("Gather", b.op("Sub", ends, count), image))


def crop_rows(
    b: GraphBuilder, image: ir.Value, crops: ir.Value, batched: ir.Value, side: int
) -> tuple[Callable[[ir.Value, ir.Value, ir.Value], ir.Value], ir.Value, ir.Value, ir.Value]:
    """(row_of, sub separator row, global separator row, `side` as a constant) over the rows of [batch·crops
    crops of side x side features, sub separator, global separator]: row_of(crop, r, q) is feature (r, q) of
    `image`'s crop (0: its global view). `batched`: a tensor whose first axis is the images'."""
    c = b.const
    base = b.op("Mul", image, crops)  # the image's first crop (its global view)
    all_crops = b.op("Mul", b.op("Shape", batched, start=0, end=1), crops)  # [1]: N·C
    sub_sep = b.op("Squeeze", b.op("Mul", all_crops, c(side * side, "crop_rows", "int64")), c([0], "sq2", "int64"))
    glb_sep = b.op("Add", sub_sep, c(1, "one_e", "int64"))
    bbc = c(side, "b", "int64")

    def row_of(crop: ir.Value, r: ir.Value, q: ir.Value) -> ir.Value:
        return b.op("Add", b.op("Mul", b.op("Add", b.op("Mul", b.op("Add", base, crop), bbc), r), bbc), q)

    return row_of, sub_sep, glb_sep, bbc
