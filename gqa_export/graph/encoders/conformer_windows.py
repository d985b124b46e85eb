"""The attention geometry of Phi-4-multimodal's NeMo-style conformer (docs/multimodal.md §20.1):
the 500-row windows a long sequence is cut into, the streaming-chunk and padding key masks, and
the clipped relative-position bias, as transformers' `Phi4MultimodalAudioModel` computes them.

- **Windows:** HF runs the conformer layers on rows of at most 500 subsampled frames
  (`max_seq_len`): a longer sequence is zero-padded to a multiple of 500 and cut into windows that
  attend and convolve only within themselves. Here every sequence is cut into `ceil(T / L)`
  windows of `L = min(T, 500)` rows, which is HF's unfold when `T > 500` and the sequence itself
  otherwise; nothing about a length is baked in.
- **Keys:** a key is "allowed" when it lies in the query's streaming chunk or the `left_chunk`
  chunks before it (`chunk_size > 0`; every key when `chunk_size < 0`) and it is a valid row.
  With one clip HF's feature extractor passes no mask, so every row is valid, the unfold's zero
  rows too; with a batch, a row is valid below `ceil(frames / time_reduction)` of its clip.
- **HF adds the mask:** `attention_mask = hs_mask.unsqueeze(1) + relative_attention_bias` adds the
  boolean mask as 1.0 / 0.0 to the scores; nothing is set to -inf. The graph adds it the same way.
- **Relative bias:** `bias_values[clip(j - i, -max, max - 1) + max]`, one value per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params

I64 = "int64"
HF_WINDOW = 500  # Phi4MultimodalAudioModel.forward's max_seq_len


@dataclass(frozen=True)
class WindowShape:
    """Streaming chunks and the relative bias (from the audio config)."""

    chunk: int  # chunk_size (< 0: one chunk, every key allowed)
    left: int  # left_chunk
    max_distance: int  # bias_max_distance
    time_reduction: int  # frames per subsampled row


@dataclass(frozen=True)
class Windows:
    """Values the layers share: rows per window, window count, and the additive score term."""

    rows: ir.Value  # [1] L = min(T', 500)
    count: ir.Value  # [1] windows per clip
    length: ir.Value  # [1] T'
    bias: ir.Value  # [B * count, heads, L, L] float32: allowed (1.0 / 0.0) + relative bias


def _i64(b: GraphBuilder, value: int, name: str) -> ir.Value:
    return b.const([value], name, np.int64)


def windows(
    b: GraphBuilder, x: ir.Value, frame_mask: ir.Value, shape: WindowShape, table: str, params: Params
) -> tuple[ir.Value, Windows]:
    """x [B, T', D] -> [B * count, L, D] (zero-padded to count * L rows) and the shared values;
    frame_mask [B, T] is the input frames' mask."""
    length = b.op("Shape", x, start=1, end=2)
    rows = b.op("Min", length, _i64(b, HF_WINDOW, "window"))
    count = b.op("Div", b.op("Sub", b.op("Add", length, rows), _i64(b, 1, "one")), rows)
    padded = b.op("Mul", count, rows)
    pads = b.op("Concat", _i64(b, 0, "zero"), b.op("Sub", padded, length), axis=0)
    x = b.op("Pad", x, pads, None, _i64(b, 1, "time_axis"))
    x = b.op("Reshape", x, b.op("Concat", _i64(b, -1, "all"), rows, b.op("Shape", x, start=2), axis=0))
    valid = _valid_rows(b, frame_mask, padded, shape.time_reduction)  # [B, count * L]
    keys = b.op("Reshape", valid, b.op("Concat", _i64(b, -1, "all"), rows, axis=0))  # [B * count, L]
    allowed = b.op("And", b.op("Unsqueeze", keys, _i64(b, 1, "row_axis")), _chunk_mask(b, rows, shape))
    bias = b.op("Add", _added_mask(b, allowed), _relative_bias(b, rows, shape, table, params))
    return x, Windows(rows=rows, count=count, length=length, bias=bias)


def unwindow(b: GraphBuilder, x: ir.Value, w: Windows) -> ir.Value:
    """[B * count, L, D] -> [B, T', D]: the windows joined, the padding rows cut."""
    joined = b.op("Reshape", x, b.op("Concat", _i64(b, -1, "all"), b.op("Mul", w.count, w.rows),
                                     b.op("Shape", x, start=2), axis=0))  # fmt: skip
    return b.op("Slice", joined, _i64(b, 0, "start"), w.length, _i64(b, 1, "time_axis"))


def _valid_rows(b: GraphBuilder, frame_mask: ir.Value, padded: ir.Value, reduction: int) -> ir.Value:
    """[B, padded] bool: row r is valid below ceil(frames / reduction) of its clip; with one clip
    (HF's extractor gives no mask) every row, the window padding included."""
    frames = b.op("ReduceSum", b.op("Cast", frame_mask, to=ir.DataType.INT64), _i64(b, 1, "time_axis"), keepdims=0)
    subsampled = b.op("Div", b.op("Add", frames, _i64(b, reduction - 1, "round_up")), _i64(b, reduction, "reduction"))
    one_clip = b.op("Equal", b.op("Shape", frame_mask, start=0, end=1), _i64(b, 1, "one_clip"))
    limit = b.op("Where", one_clip, padded, subsampled)  # [B]
    index = b.op("Range", b.const(0, "zero_scalar", np.int64), b.op("Squeeze", padded), b.const(1, "step", np.int64))
    return b.op("Less", b.op("Unsqueeze", index, _i64(b, 0, "batch_axis")), b.op("Unsqueeze", limit, _i64(b, 1, "ax")))


def _added_mask(b: GraphBuilder, allowed: ir.Value) -> ir.Value:
    """[B', 1, L, L] float32: 1.0 where the key is allowed, 0.0 elsewhere (HF adds the boolean)."""
    return b.op("Unsqueeze", b.op("Cast", allowed, to=ir.DataType.FLOAT), _i64(b, 1, "head_axis"))


def _positions(b: GraphBuilder, rows: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(i [L, 1], j [1, L]) int64 row indices."""
    index = b.op("Range", b.const(0, "zero_scalar", np.int64), b.op("Squeeze", rows), b.const(1, "step", np.int64))
    return b.op("Unsqueeze", index, _i64(b, 1, "col")), b.op("Unsqueeze", index, _i64(b, 0, "row"))


def _chunk_mask(b: GraphBuilder, rows: ir.Value, shape: WindowShape) -> ir.Value:
    """[L, L] bool: key j in query i's chunk or one of the `left` chunks before it (HF's
    adaptive_enc_mask on chunks of `chunk` rows); all True for a negative chunk size."""
    i, j = _positions(b, rows)
    if shape.chunk < 0:
        return b.op("GreaterOrEqual", b.op("Add", i, j), b.const(0, "zero_scalar", np.int64))
    size = b.const(shape.chunk, "chunk", np.int64)
    qi, kj = b.op("Div", i, size), b.op("Div", j, size)
    after_left = b.op("GreaterOrEqual", kj, b.op("Sub", qi, b.const(shape.left, "left_chunks", np.int64)))
    return b.op("And", after_left, b.op("LessOrEqual", kj, qi))


def _relative_bias(b: GraphBuilder, rows: ir.Value, shape: WindowShape, table: str, params: Params) -> ir.Value:
    """[1, heads, L, L]: bias_values[clip(j - i, -max, max - 1) + max] (asymmetric buckets)."""
    i, j = _positions(b, rows)
    far = shape.max_distance
    rel = b.op("Clip", b.op("Sub", j, i), b.const(-far, "min_distance", np.int64),
               b.const(far - 1, "max_distance", np.int64))  # fmt: skip
    values = b.initializer(table, params.tensor(table))  # [2 * max, heads]
    gathered = b.op("Gather", values, b.op("Add", rel, b.const(far, "bucket_offset", np.int64)), axis=0)
    return b.op("Unsqueeze", b.op("Transpose", gathered, perm=[2, 0, 1]), _i64(b, 0, "batch_axis"))
