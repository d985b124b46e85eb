"""Chunked local self-attention with a learned relative-position term, as a conformer audio encoder
computes it (docs/multimodal.md §16.1).

The sequence is cut into blocks of `chunk` frames. Each block's queries attend to a context of
`chunk + past + future` frames around it (`past = context_left - 1`, `future = context_right`),
gathered from the keys zero-padded on both sides. Scores are

    softcap(q·k + rel_shift(q·R)),  q = W_q x · head_dim^-0.5 / ln 2 · softplus(per_dim_scale),
                                    k = W_k x · ln(1 + e) / ln 2,

with R the relative keys: a fixed sinusoid table over the distances `ctx//2 … 0` through
`relative_k_proj`. `rel_shift` is Transformer-XL's pad / flatten / cut / reshape trick, done here
with the same tensor ops so that every score lands where HF's lands. A key outside the sequence,
marked invalid by the frame mask, or outside the window (`0 <= q - k < past` or
`0 < k - q < future`) gets the invalid-logit value after the softcap. Everything runs in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import soft_cap
from gqa_export.graph.builder import GraphBuilder

I64 = "int64"


@dataclass(frozen=True)
class ChunkShape:
    """The block geometry of the attention (from the audio config)."""

    chunk: int
    past: int  # attention_context_left - 1
    future: int  # attention_context_right
    heads: int
    head_dim: int
    hidden: int
    logit_cap: float
    invalid: float  # attention_invalid_logits_value

    @property
    def context(self) -> int:
        return self.chunk + self.past + self.future

    @property
    def distances(self) -> int:
        """Rows of the relative-position table: distances ctx//2 down to 0."""
        return self.context // 2 + 1


def relative_table(shape: ChunkShape) -> np.ndarray:
    """[distances, hidden] float32: sin | cos of each distance (ctx//2 … 0) times the inverse
    timescales exp(-i · ln(1e4) / max(hidden/2 - 1, 1)), as the encoder computes it in float32."""
    half = shape.hidden // 2
    step = math.log(10000.0) / max(half - 1, 1)
    inv = np.exp(np.arange(half, dtype=np.float32) * np.float32(-step)).astype(np.float32)
    positions = np.arange(shape.context // 2, -1, -1, dtype=np.float32)[:, None]
    scaled = (positions * inv[None, :]).astype(np.float32)
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1).astype(np.float32)


def block_indices(b: GraphBuilder, blocks: ir.Value, shape: ChunkShape) -> ir.Value:
    """[blocks, ctx] int64: block n's context reads padded positions n·chunk + j."""
    starts = b.op("Mul", b.op("Range", b.const(0, "zero", I64), blocks, b.const(1, "one", I64)),
                  b.const(shape.chunk, "chunk", I64))  # fmt: skip
    offsets = b.const(np.arange(shape.context, dtype=np.int64)[None, :], "context_offsets")
    return b.op("Add", b.op("Unsqueeze", starts, b.const([1], "axis1", I64)), offsets)


def key_mask(b: GraphBuilder, valid: ir.Value, index: ir.Value, shape: ChunkShape) -> ir.Value:
    """[B, 1, blocks, chunk, ctx] bool, True where the score is kept: the key is a frame of the
    sequence that the mask marks valid, inside the window of the query row."""
    pads = b.const([shape.past, shape.future + shape.chunk - 1], "mask_pads", I64)
    padded = b.op("Pad", b.op("Cast", valid, to=ir.DataType.INT64), pads, b.const(0, "pad0", I64),
                  b.const([1], "time_axis", I64))  # fmt: skip
    keys = b.op("Cast", b.op("Gather", padded, index, axis=1), to=ir.DataType.BOOL)  # [B, blocks, ctx]
    i = np.arange(shape.chunk)[:, None]
    j = np.arange(shape.context)[None, :]
    dist = shape.past + i - j  # query minus key
    window = ((dist >= 0) & (dist < shape.past)) | ((dist < 0) & (-dist < shape.future))
    allowed = b.op("And", b.op("Unsqueeze", keys, b.const([2], "rows_axis", I64)), b.const(window, "window"))
    return b.op("Unsqueeze", allowed, b.const([1], "heads_axis", I64))


def chunked_attention(
    b: GraphBuilder,
    q: ir.Value,
    k: ir.Value,
    v: ir.Value,
    relative_keys: ir.Value,
    allowed: ir.Value,
    index: ir.Value,
    blocks: ir.Value,
    length: ir.Value,
    shape: ChunkShape,
) -> ir.Value:
    """q, k, v [B, T, heads, head_dim] (scaled), relative keys [distances, heads·head_dim] ->
    [B, T, hidden]."""
    c, ctx, hd, nh = shape.chunk, shape.context, shape.head_dim, shape.heads
    padded_len = b.op("Mul", blocks, b.const([c], "chunk_len", I64))
    time = b.const([1], "time_axis", I64)
    # queries: [B, blocks, chunk, nh, hd] -> [B, nh, blocks, chunk, hd]
    q_pad = b.op("Pad", q, b.op("Concat", b.const([0], "no_pad", I64), b.op("Sub", padded_len, length), axis=0),
                 None, time)  # fmt: skip
    queries = b.op("Transpose", b.op("Reshape", q_pad, b.const([0, -1, c, nh, hd], "q_blocks", I64)),
                   perm=[0, 3, 1, 2, 4])  # fmt: skip
    # keys and values: zero-padded, the context of each block gathered -> [B, blocks, ctx, nh, hd]
    kv_pads = b.const([shape.past, shape.future + c - 1], "kv_pads", I64)
    keys, values = (b.op("Gather", b.op("Pad", x, kv_pads, None, time), index, axis=1) for x in (k, v))
    scores = b.op("MatMul", queries, b.op("Transpose", keys, perm=[0, 3, 1, 4, 2]))  # [B, nh, blocks, c, ctx]
    # relative term: q · R over the distances, then Transformer-XL's shift
    rel = b.op("Transpose", b.op("Reshape", relative_keys, b.const([-1, nh, hd], "rel_heads", I64)), perm=[1, 2, 0])
    flat_q = b.op("Reshape", queries, b.const([0, nh, -1, hd], "q_flat", I64))
    bd = b.op("Reshape", b.op("MatMul", flat_q, rel), b.const([0, nh, -1, c, shape.distances], "bd_blocks", I64))
    bd = b.op("Pad", bd, b.const([0, ctx + 1 - shape.distances], "shift_pad", I64), None,
              b.const([4], "last_axis", I64))  # fmt: skip
    bd = b.op("Reshape", bd, b.const([0, nh, -1, c * (ctx + 1)], "shift_flat", I64))
    bd = b.op("Slice", bd, b.const([0], "start", I64), b.const([c * ctx], "shift_end", I64), b.const([3], "ax3", I64))
    bd = b.op("Reshape", bd, b.const([0, nh, -1, c, ctx], "shift_back", I64))
    scores = b.op("Add", scores, bd)
    cap = b.const(np.float32(shape.logit_cap), "softcap")
    scores = soft_cap(b, scores, cap)
    scores = b.op("Where", allowed, scores, b.const(np.float32(shape.invalid), "invalid_logit"))
    probs = b.op("Softmax", scores, axis=-1)
    out = b.op("MatMul", probs, b.op("Transpose", values, perm=[0, 3, 1, 2, 4]))  # [B, nh, blocks, c, hd]
    out = b.op("Reshape", b.op("Transpose", out, perm=[0, 2, 3, 1, 4]), b.const([0, -1, nh * hd], "merged", I64))
    return b.op("Slice", out, b.const([0], "start", I64), length, time)
