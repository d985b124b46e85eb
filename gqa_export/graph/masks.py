"""Positions and additive attention biases built in the graph from `attention_mask` (and
`input_ids` for bidirectional blocks), for the standard-Attention graphs.

Two slot layouts, one per graph kind:
- "concat" (mode `bias`, share buffer off): ORT GenAI passes the growing past; key slot j is
  column j of attention_mask, and a token's position is cumsum(mask) - 1 (right or left padding).
- "compact" (the `split` prefill graph, share buffer on): the KV buffer is the one GroupQueryAttention
  fills, where each row's tokens sit at slots 0..n-1 in position order (docs/ort-ops.md §1.4, §1.5, right
  padding); this step's tokens are written at write_index = sum(mask) - sum(mask of this chunk).

The bias is 0 where attention is allowed and the dtype's lowest finite value elsewhere (finite, so a
row with nothing allowed - a padding query - gives a uniform softmax instead of NaN).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES

INT64 = ir.DataType.INT64


@dataclass(frozen=True)
class MaskKind:
    """Which bias a layer needs: its window (-1: none), whether bidirectional blocks apply, and its
    attention chunk (0: none; else a query sees only keys of its own chunk, position // chunk)."""

    window: int
    bidirectional: bool
    chunk: int = 0


@dataclass(frozen=True)
class MaskValues:
    """Per-graph values shared by all layers."""

    positions: ir.Value  # [B,S] int64, the RoPE positions of this step's tokens
    total_length: ir.Value  # [1] int64, T
    write_index: ir.Value | None  # [B] int64 (compact layout only)
    nonpad: ir.Value | None  # [B] int64 keys valid after this step's write: write_index + S (compact only)
    biases: dict[MaskKind, ir.Value]  # [B,1,S,T] additive bias per layer kind
    key_positions: ir.Value | None = None  # [B,1,T] int64, each key slot's position (ALiBi reads it)


@dataclass(frozen=True)
class StatePadding:
    """Which of this run's tokens the recurrent-state mixers take in. onnxruntime-genai marks a
    batched prompt's trailing pad_token_id run with zeros in attention_mask (right padding) and
    feeds every generated token with a 1 (docs/hybrid-state.md §1.5): a row's state must come out
    of the prompt as if the prompt had stopped at its last real token."""

    keep: ir.Value  # [B,S,1] float: attention_mask's last S columns (1 a token, 0 padding)
    end: ir.Value  # [B,1] int64: 1 + the run index of the last token (S when nothing trails it)
    # [B,S,1] float: 1 at the row's first token (position 0), where RecurrentGemma's RG-LRU resets;
    # built only where a mixer reads it (state_padding's `first`)
    first: ir.Value | None = None
    _indices: dict[tuple[int, int | None], ir.Value] = field(default_factory=dict, compare=False, repr=False)

    def conv_state_index(self, b: GraphBuilder, width: int, channels: int | None = None) -> ir.Value:
        """Where a conv state's `width` (K - 1) inputs sit in concat(past, run): steps end + j,
        j < width, the inputs up to each row's last real token. As GatherND rows [B, width, 1] for
        a channels-last concatenation (`channels` None), or as GatherElements indices
        [B, channels, width] for a channels-first one. Built once per graph, at the first conv
        layer, and read by every other (a decode step runs them once, not once per layer)."""
        key = (width, channels)
        if key not in self._indices:
            with b.graph_scope("state_padding"):
                offsets = b.const(np.arange(width, dtype=np.int64).reshape(1, width), "state_offsets")
                steps = b.op("Add", self.end, offsets, name="state_steps")  # [B, width]
                if channels is None:
                    index = b.op("Unsqueeze", steps, _i64(b, [2], "state_axis"), name="state_rows")
                else:
                    index = b.op(
                        "Expand", b.op("Unsqueeze", steps, _i64(b, [1], "channel_axis")),
                        _i64(b, [1, channels, 1], "state_index_shape"), name="state_columns",
                    )  # fmt: skip
            self._indices[key] = index
        return self._indices[key]


def _i64(b: GraphBuilder, values: list[int], name: str) -> ir.Value:
    return b.const(values, name, "int64")


def mask_values(
    b: GraphBuilder,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    layout: str,
    kinds: set[MaskKind],
    bidirectional_ids: tuple[int, ...],
    dtype: ir.DataType,
    window_bounded: bool = False,
    key_length: ir.Value | None = None,
) -> MaskValues:
    """A bidirectional run is OR-ed onto the causal part. Unbounded (transformers' generic block
    mask, `or_masks(sliding causal, blockwise_overlay)`): a run also overrides the window. Bounded
    (Gemma-3/4's own vision masks, `(kv > q - W) & (causal | same run)`): a run's token sees the
    run's later tokens however far ahead, but no key more than window-1 positions back.

    key_length ([1] int64, compact layout): the biases' key dimension, when attention reads the
    whole buffer (the nonpad_kv_seqlen form) instead of its first T slots."""
    with b.scope("attn_bias"):
        zero, one = _i64(b, [0], "zero"), _i64(b, [1], "one")
        total = b.op("Shape", attention_mask, start=1, end=2)  # [1] = T
        chunk = b.op("Shape", input_ids, start=1, end=2)  # [1] = S
        start = b.op("Sub", total, chunk)
        chunk_mask = b.op("Slice", attention_mask, start, total, one)  # [B,S]
        keys = total if key_length is None else key_length
        slots = b.op("Range", _i64(b, 0, "r0"), b.op("Squeeze", keys, zero), _i64(b, 1, "r1"))  # [T] or [L]
        valid = b.op("Cast", attention_mask, to=ir.DataType.BOOL)  # [B,T]
        if layout == "concat":
            cumsum = b.op("Sub", b.op("CumSum", attention_mask, one), one)  # [B,T]
            positions = b.op("Slice", cumsum, start, total, one)  # [B,S]
            key_pos = cumsum
            write_index = nonpad = None
        else:
            chunk_cumsum = b.op("Sub", b.op("CumSum", chunk_mask, one), one)
            real_total = b.op("ReduceSum", attention_mask, one, keepdims=1)  # [B,1]
            real_chunk = b.op("ReduceSum", chunk_mask, one, keepdims=1)
            write = b.op("Sub", real_total, real_chunk)  # [B,1]
            write_index = b.op("Squeeze", write, one)
            # bottom-right causal per row: a right-padded prompt row writes S slots from 0
            nonpad = b.op("Add", write_index, chunk)
            positions = b.op("Add", write, b.op("Max", chunk_cumsum, zero))  # [B,S]
            key_shape = b.op("Concat", b.op("Shape", attention_mask, start=0, end=1), keys, axis=0)
            key_pos = b.op("Expand", b.op("Unsqueeze", slots, zero), key_shape)  # [B,T] or [B,L]
            valid = b.op("Less", key_pos, real_total)  # slots past the filled region hold no key
        key_positions = b.op("Unsqueeze", key_pos, one)  # [B,1,T]
        q = b.op("Unsqueeze", positions, _i64(b, [2], "two"))  # [B,S,1]
        allowed_base = b.op("And", b.op("Unsqueeze", valid, one), b.op("LessOrEqual", key_positions, q))
        distance = b.op("Sub", q, key_positions)  # [B,S,T]
        bidir = _bidirectional(b, input_ids, positions, key_positions, bidirectional_ids)
        lowest = np.finfo(np.float32).min if dtype == ir.DataType.FLOAT else np.finfo(np.float16).min
        if dtype == ir.DataType.BFLOAT16:
            lowest = -3.3e38
        np_dtype = NUMPY_DTYPES[dtype]
        zero_f = b.const(np.zeros((), np_dtype), "bias_zero")
        low_f = b.const(np.asarray(lowest, np.float32).astype(np_dtype), "bias_lowest")
        biases = {}
        for kind in sorted(kinds, key=lambda k: (k.window, k.bidirectional, k.chunk)):
            allowed = allowed_base
            bi = b.op("And", bidir, b.op("Unsqueeze", valid, one)) if bidir is not None and kind.bidirectional else None
            if bi is not None and window_bounded:
                allowed = b.op("Or", allowed, bi)
            if kind.window > 0:
                window = _i64(b, [kind.window], f"window{kind.window}")
                allowed = b.op("And", allowed, b.op("Less", distance, window))
            if bi is not None and not window_bounded:
                allowed = b.op("Or", allowed, bi)
            if kind.chunk > 0:  # HF's chunked_overlay: the same chunk of positions (right padding)
                allowed = b.op("And", allowed, _same_chunk(b, q, key_positions, kind.chunk))
            bias = b.op("Where", allowed, zero_f, low_f)
            name = f"bias_window{kind.window}" + ("_bidirectional" if bi is not None else "")
            name += f"_chunk{kind.chunk}" if kind.chunk > 0 else ""
            biases[kind] = b.op("Unsqueeze", bias, one, name=name)  # [B,1,S,T]
    return MaskValues(positions, total, write_index, nonpad, biases, key_positions)


def _same_chunk(b: GraphBuilder, q: ir.Value, key_positions: ir.Value, chunk: int) -> ir.Value:
    """[B,S,T] True where query and key positions fall in the same chunk (position // chunk). Real
    tokens' positions are >= 0, where Div's truncation is the floor; pads are masked already."""
    size = _i64(b, [chunk], f"chunk{chunk}")
    return b.op("Equal", b.op("Div", q, size), b.op("Div", key_positions, size), name=f"same_chunk{chunk}")


def state_padding(
    b: GraphBuilder, input_ids: ir.Value, attention_mask: ir.Value, dtype: ir.DataType, first: bool = False
) -> StatePadding:
    """The padding of this run's S tokens, read from attention_mask's last S columns; with `first`,
    also where a row's position 0 falls in the run: a real token with one 1 in the mask up to it
    (cumsum(attention_mask) = 1, as HF generate numbers positions from the mask)."""
    with b.scope("state_padding"):
        zero, one = _i64(b, [0], "zero"), _i64(b, [1], "one")
        total = b.op("Shape", attention_mask, start=1, end=2)
        chunk = b.op("Shape", input_ids, start=1, end=2)
        chunk_mask = b.op("Slice", attention_mask, b.op("Sub", total, chunk), total, one)  # [B,S]
        keep = b.op("Unsqueeze", b.op("Cast", chunk_mask, to=dtype), _i64(b, [2], "two"), name="keep")
        unit = _i64(b, 1, "unit")  # a scalar 1
        steps = b.op("Range", unit, b.op("Add", b.op("Squeeze", chunk, zero), unit), unit)  # [S]: 1..S
        end = b.op("ReduceMax", b.op("Mul", chunk_mask, steps), one, keepdims=1, name="end")  # [B,1]
        at_zero = None
        if first:  # the mask's count up to each token of the run is 1 at position 0 (and at pads trailing it)
            counts = b.op("Slice", b.op("CumSum", attention_mask, one), b.op("Sub", total, chunk), total, one)
            real_first = b.op("And", b.op("Equal", counts, one), b.op("Cast", chunk_mask, to=ir.DataType.BOOL))
            at_zero = b.op("Unsqueeze", b.op("Cast", real_first, to=dtype), _i64(b, [2], "two"), name="first")
    return StatePadding(keep, end, at_zero)


def token_positions(b: GraphBuilder, input_ids: ir.Value, attention_mask: ir.Value) -> ir.Value:
    """[B,S] int64 positions of this step's tokens: cumsum(attention_mask) - 1 over the last S
    columns, as HF generate numbers them (left or right padding)."""
    with b.scope("positions"):
        one = _i64(b, [1], "one")
        total = b.op("Shape", attention_mask, start=1, end=2)
        start = b.op("Sub", total, b.op("Shape", input_ids, start=1, end=2))
        cumsum = b.op("Sub", b.op("CumSum", attention_mask, one), one)
        return b.op("Max", b.op("Slice", cumsum, start, total, one), _i64(b, [0], "zero"))


def _bidirectional(
    b: GraphBuilder, input_ids: ir.Value, positions: ir.Value, key_positions: ir.Value, ids: tuple[int, ...]
) -> ir.Value | None:
    """[B,S,T] True where query and key sit in the same maximal run of `ids` in this chunk.

    A run is contiguous in position; each query in a run may see keys whose positions fall in
    [run start, run end] (future ones included). Outside runs nothing changes.
    """
    if not ids:
        return None
    with b.scope("bidirectional"):
        one, two = _i64(b, [1], "one"), _i64(b, [2], "two")
        is_bi = b.op("Equal", b.op("Unsqueeze", input_ids, two), _i64(b, [list(ids)], "ids"))  # [B,S,K]
        is_bi = b.op(
            "Cast", b.op("ReduceMax", b.op("Cast", is_bi, to=ir.DataType.INT64), two, keepdims=0), to=ir.DataType.BOOL
        )
        bi_int = b.op("Cast", is_bi, to=INT64)
        prev = b.op("Pad", bi_int, b.const([0, 1, 0, 0], "pad_prev", "int64"))  # [B,S+1]
        prev = b.op("Slice", prev, _i64(b, [0], "s0"), b.op("Shape", bi_int, start=1, end=2), one)
        starts = b.op("Mul", bi_int, b.op("Sub", _i64(b, [1], "one_i"), prev))  # run starts
        run_id = b.op("CumSum", starts, one)  # [B,S]
        same = b.op(
            "And",
            b.op("Equal", b.op("Unsqueeze", run_id, two), b.op("Unsqueeze", run_id, one)),
            b.op("And", b.op("Unsqueeze", is_bi, two), b.op("Unsqueeze", is_bi, one)),
        )  # [B,S,S]
        pos_j = b.op("Unsqueeze", positions, one)  # [B,1,S]
        big, small = _i64(b, [1 << 40], "big"), _i64(b, [-1], "small")
        run_start = b.op("ReduceMin", b.op("Where", same, pos_j, big), two, keepdims=1)  # [B,S,1]
        run_end = b.op("ReduceMax", b.op("Where", same, pos_j, small), two, keepdims=1)
        inside = b.op(
            "And", b.op("GreaterOrEqual", key_positions, run_start), b.op("LessOrEqual", key_positions, run_end)
        )
        return b.op("And", inside, b.op("Unsqueeze", is_bi, two))  # [B,S,T]
