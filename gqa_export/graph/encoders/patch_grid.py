"""Per-patch coordinates of a packed batch of image grids, computed in the graph from
`image_grid_thw [N, 3]` (docs/multimodal.md §11).

The processor packs every image's patches one after another, each image frame by frame, each frame
merge block by merge block (row-major over blocks), each block row-major over its
spatial_merge_size² patches. From a patch's row index alone the graph recovers its image, frame and
(h, w) position, then the keys that say which patches attend to each other: same image frame
(full-attention blocks) or same image frame and window (windowed blocks). Everything is vectorized
over the patch axis, so one graph serves any number of images of any grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES

I64 = ir.DataType.INT64
# Segment keys pack (image, frame, window row, window column) into one int64: 16 bits per image
# and per frame, 12 bits per window coordinate (4096 windows a side: far beyond any real image).
FRAME_BITS, WINDOW_BITS = 16, 12


@dataclass(frozen=True)
class PatchGrid:
    """Per-patch int64 vectors [P] (P = rows of pixel_values)."""

    h: ir.Value  # row of the patch within its frame
    w: ir.Value  # column of the patch within its frame
    height: ir.Value  # its frame's height in patches
    width: ir.Value  # its frame's width in patches
    frame_key: ir.Value  # equal for patches of the same image frame
    window_key: ir.Value  # equal for patches of the same image frame and attention window


def patch_grid(
    b: GraphBuilder, pixel_values: ir.Value, grid_thw: ir.Value, merge: int, window_blocks: int
) -> PatchGrid:
    """Coordinates and segment keys of every patch row. `window_blocks`: the window side in merge
    blocks (window_size // spatial_merge_size // patch_size); windows tile each frame's block grid
    from its top-left corner, the last ones cut by the frame's edge (0: no windows; the window key
    is then the frame key)."""

    def c(value: int | list[int], name: str) -> ir.Value:
        return b.const(value, name, "int64")

    def op(kind: str, *args: ir.Value, **attrs: object) -> ir.Value:
        return b.op(kind, *args, **attrs)

    with b.scope("patch_grid"):
        t, h, w = (op("Gather", grid_thw, c(i, f"col{i}"), axis=1) for i in range(3))  # [N] each
        sizes = op("Mul", op("Mul", t, h), w)
        ends = op("CumSum", sizes, c(0, "axis"))
        starts = op("Sub", ends, sizes)
        count = op("Gather", op("Shape", pixel_values), c(0, "rows"))
        rows = op("Range", c(0, "zero"), count, c(1, "one"))  # [P]
        # image of each row: how many images end at or before it
        after = op("GreaterOrEqual", op("Unsqueeze", rows, c([1], "ax1")), op("Unsqueeze", ends, c([0], "ax0")))
        image = op("ReduceSum", op("Cast", after, to=I64), c([1], "sum_ax"), keepdims=0)
        local = op("Sub", rows, op("Gather", starts, image))
        height, width = op("Gather", h, image), op("Gather", w, image)
        frame_size = op("Mul", height, width)
        frame = op("Div", local, frame_size)
        in_frame = op("Mod", local, frame_size)
        unit = c(merge * merge, "unit")
        block, in_block = op("Div", in_frame, unit), op("Mod", in_frame, unit)
        blocks_wide = op("Div", width, c(merge, "merge"))
        block_h, block_w = op("Div", block, blocks_wide), op("Mod", block, blocks_wide)
        m = c(merge, "merge_size")
        pos_h = op("Add", op("Mul", block_h, m), op("Div", in_block, m))
        pos_w = op("Add", op("Mul", block_w, m), op("Mod", in_block, m))
        frame_key = op("Add", op("Mul", image, c(1 << FRAME_BITS, "frame_bits")), frame)
        window_key = frame_key
        if window_blocks > 0:
            wb = c(window_blocks, "window_blocks")
            win_h, win_w = op("Div", block_h, wb), op("Div", block_w, wb)
            shift = c(1 << WINDOW_BITS, "window_bits")
            window_key = op("Add", op("Mul", op("Add", op("Mul", frame_key, shift), win_h), shift), win_w)
    return PatchGrid(pos_h, pos_w, height, width, frame_key, window_key)


def segment_bias(b: GraphBuilder, key: ir.Value, dtype: ir.DataType, name: str) -> ir.Value:
    """[P, P] additive attention bias: 0 where two patches share `key`, the dtype's lowest value
    elsewhere (every patch shares its own key, so no softmax row is all masked)."""
    np_dtype = NUMPY_DTYPES[dtype]
    with b.scope(name):
        same = b.op(
            "Equal",
            b.op("Unsqueeze", key, b.const([1], "ax1", "int64")),
            b.op("Unsqueeze", key, b.const([0], "ax0", "int64")),
        )
        zero = b.const(np.zeros((), np_dtype), "zero")
        low = b.const(np.array(np.finfo(np.float32).min if dtype == ir.DataType.FLOAT else -65504.0, np_dtype), "low")
        return b.op("Where", same, zero, low)
