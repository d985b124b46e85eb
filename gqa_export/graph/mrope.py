"""Multimodal RoPE: each rotary frequency reads one of three positions (temporal, height, width).

A multimodal decoder's graph takes `position_ids [3, B, S]` int64 (the runtime computes them from
input_ids and the image grids, docs/multimodal.md §11). Text
tokens have three equal positions, so for text this is plain RoPE; image tokens get their
(t, h, w) in the image. The rope config's `mrope_section` [t, h, w] says how many of the
rotary_dim / 2 frequencies read each row:

- contiguous (Qwen2-VL, Qwen2.5-VL): the first t frequencies read row 0, the next h row 1, the last
  w row 2;
- interleaved (`mrope_interleaved`, Qwen3-VL, Qwen3.5): frequency i reads row 1 when i % 3 == 1
  and i < 3h, row 2 when i % 3 == 2 and i < 3w, else row 0.

The graph gathers the shared cos/sin tables at all three rows and keeps, per frequency column, the
row it reads (a 0/1 mask summed over the rows: exact, every kept value is multiplied by 1 and
added to zeros).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.rope import RopeConfig


def mrope_rows(rope: RopeConfig) -> np.ndarray:
    """The position row (0 t, 1 h, 2 w) each of the rotary_dim / 2 frequencies reads."""
    sections = rope.params.get("mrope_section")
    half = rope.rotary_dim // 2
    interleaved = bool(rope.params.get("mrope_interleaved"))
    # interleaved: HF reads the h and w counts alone (frequency i < 3h / 3w), so any sum runs there
    if not sections or len(sections) != 3 or (sum(sections) != half and not interleaved):
        raise InputError(
            f"3-D position_ids need rope mrope_section [t, h, w] summing to rotary_dim / 2 = {half} "
            f"(config has {sections}); export the text-only decoder instead"
        )
    t, h, w = (int(s) for s in sections)
    if interleaved:
        i = np.arange(half)
        return np.where((i % 3 == 1) & (i < 3 * h), 1, np.where((i % 3 == 2) & (i < 3 * w), 2, 0))
    return np.repeat([0, 1, 2], [t, h, w])


def mrope_tables(
    b: GraphBuilder,
    position_ids: ir.Value,
    caches: dict[str, tuple[ir.Value, ir.Value]],
    ropes: dict[str, RopeConfig],
    dtype: ir.DataType,
) -> dict[str, tuple[ir.Value, ir.Value]]:
    """cos/sin rows [B, S, 1, rotary / 2] per rope key, as rotary.rope_tables returns them."""
    out = {}
    with b.scope("mrope"):
        rows_axis, head_axis = b.const([0], "rows_axis", "int64"), b.const([2], "head_axis", "int64")
        for key, (cos, sin) in caches.items():
            rows = mrope_rows(ropes[key])
            onehot = (np.arange(3)[:, None] == rows[None, :]).astype(NUMPY_DTYPES[dtype])[:, None, None, :]
            select = b.const(onehot, f"{key}_sections")  # [3, 1, 1, rotary / 2]
            pair = []
            for name, table in (("cos", cos), ("sin", sin)):
                gathered = b.op("Gather", table, position_ids, name=f"{key}_{name}_rows")  # [3, B, S, rot/2]
                picked = b.op("ReduceSum", b.op("Mul", gathered, select), rows_axis, keepdims=0)
                pair.append(b.op("Unsqueeze", picked, head_axis, name=f"{key}_{name}"))
            out[key] = (pair[0], pair[1])
    return out
