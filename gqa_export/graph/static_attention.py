"""Attention for static-shape graphs (QNN): plain MatMul / Softmax over a fixed KV buffer.

onnxruntime-genai drives these graphs through its windowed-input path (docs/eps.md §7): the prompt
is padded at its end to whole windows of S tokens and each window runs the prefill graph; each
generated token runs the S = 1 graph. The runtime feeds `past_sequence_length` [1,1] int32: the
index of this step's last token (+S per window, starting at -1; the real prompt length at the
first generated token, then +1). Every other value is derived from it here:

- positions of this step's tokens: last - (S - 1) + [0, S), the RoPE rows and the slots written;
- the KV buffer [1, kv_heads, C, D] (C = max_length, static) is past and present at once (the
  runtime forces one shared buffer for a static cache); ScatterND writes this step's K/V at those
  slots, so slot j holds position j;
- key slot j is visible to query i iff j <= position_i (and j > position_i - window on windowed
  layers): slots past a query's position hold stale values or the pad tokens of the prompt's last
  window, which the mask hides until a generated token overwrites them.

QNN has neither GroupQueryAttention nor the Attention op nor Range/Shape, so everything is plain
ops on constants of static shape (docs/eps.md §7.2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import soft_cap
from gqa_export.graph.blocks import LayerContext, rotated_heads
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.standard import LayerKV


@dataclass(frozen=True)
class StaticSteps:
    """Per-graph values every layer reads."""

    positions: ir.Value  # [1, S] int64
    write_slots: ir.Value  # [1, 1, S, 1] int64: the buffer slot of each of this step's tokens
    biases: dict[int, ir.Value]  # a layer's window (<= 0: none) -> [1, 1, S, C] additive bias
    step: int  # S
    context: int  # C


def static_steps(
    b: GraphBuilder,
    past_length: ir.Value,
    total_length: ir.Value,
    step: int,
    context: int,
    windows: set[int],
    dtype: ir.DataType,
) -> StaticSteps:
    """Positions, write slots and one bias per window kind, from `past_sequence_length`. The
    runtime's `total_sequence_length` (search.max_length) bounds the write slots: a prompt's
    end padding never writes past the buffer, whatever max_length the caller runs with."""
    with b.scope("static_steps"):
        last = b.op("Cast", b.op("Reshape", past_length, b.const([1, 1], "row", "int64")), to=ir.DataType.INT64)
        offsets = b.const(np.arange(step, dtype=np.int64).reshape(1, step) - (step - 1), f"offsets_{step}")
        positions = b.op("Add", last, offsets, name="positions")  # [1, S]
        query = b.op(
            "Reshape", positions, b.const([1, 1, step, 1], f"query_shape_{step}", "int64"), name="query_positions"
        )
        total = b.op("Cast", b.op("Reshape", total_length, b.const([1, 1, 1, 1], "total_shape", "int64")),
                     to=ir.DataType.INT64)  # fmt: skip
        capacity = b.op("Min", total, b.const([[[[context]]]], "context", "int64"))
        slots_written = b.op("Min", query, b.op("Sub", capacity, b.const(1, "one", "int64")), name="write_slots")
        slots = b.const(np.arange(context, dtype=np.int64).reshape(1, 1, 1, context), "key_slots")
        seen = b.op("LessOrEqual", slots, query, name="causal")  # [1, 1, S, C]
        zero = b.const(np.zeros((), NUMPY_DTYPES[dtype]), "zero")
        lowest = b.const(np.array(np.finfo(NUMPY_DTYPES[dtype]).min, NUMPY_DTYPES[dtype]), "lowest")
        biases = {}
        for window in sorted(windows):
            allowed = seen
            if window > 0:
                oldest = b.op("Sub", query, b.const(window, f"window_{window}", "int64"))
                allowed = b.op("And", seen, b.op("Greater", slots, oldest), name=f"window_{window}_mask")
            biases[window] = b.op("Where", allowed, zero, lowest, name=f"bias_{max(window, 0)}")
    return StaticSteps(positions, slots_written, biases, step, context)


def _scatter_indices(b: GraphBuilder, steps: StaticSteps, kv_heads: int) -> ir.Value:
    """[1, kv_heads, S, 3] (batch 0, head h, slot of token s) for ScatterND into [1, kv_heads, C, D]."""
    S = steps.step
    heads = np.broadcast_to(np.arange(kv_heads, dtype=np.int64).reshape(1, kv_heads, 1, 1), (1, kv_heads, S, 1))
    fixed = b.const(np.concatenate([np.zeros_like(heads), heads], axis=-1), f"scatter_heads_{kv_heads}x{S}")
    slots = b.op("Expand", steps.write_slots, b.const([1, kv_heads, S, 1], f"scatter_shape_{kv_heads}x{S}", "int64"))
    return b.op("Concat", fixed, slots, axis=-1, name=f"scatter_indices_{kv_heads}")


def static_attention(
    lc: LayerContext,
    x: ir.Value,
    past: tuple[ir.Value, ir.Value],
    steps: StaticSteps,
    rope: dict[str, tuple[ir.Value, ir.Value]],
) -> tuple[ir.Value, LayerKV]:
    """Returns (output [1, S, Nq*D], the layer's KV): the buffer written in place, then attended."""
    b, dims, layer = lc.b, lc.dims, lc.layer
    table = rope[layer.rope] if layer.rope is not None else None
    shaped = rotated_heads(lc, x, table, reshape_v=True)  # [1, S, N, D]
    q, k, v = (b.op("Transpose", shaped[n], perm=[0, 2, 1, 3], name=f"{n}_bnsh") for n in ("q", "k", "v"))
    indices = _scatter_indices(b, steps, layer.num_kv_heads)
    present_k = b.op("ScatterND", past[0], indices, k, name="k_write")
    present_v = b.op("ScatterND", past[1], indices, v, name="v_write")
    keys, values = present_k, present_v
    group = dims.num_heads // layer.num_kv_heads
    if group > 1:  # each kv head serves `group` query heads: repeat it, as HF's repeat_kv
        C, D = steps.context, layer.head_dim
        wide = b.const([1, layer.num_kv_heads, group, C, D], "repeat_shape", "int64")
        flat = b.const([1, dims.num_heads, C, D], "heads_shape", "int64")
        axis = b.const([2], "group_axis", "int64")
        keys, values = (
            b.op("Reshape", b.op("Expand", b.op("Unsqueeze", t, axis), wide), flat, name=f"{n}_repeat")
            for t, n in ((keys, "k"), (values, "v"))
        )
    dtype = lc.params.dtype
    scale = b.const(np.array(dims.scale(layer), NUMPY_DTYPES[dtype]), "scale")
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", keys, perm=[0, 1, 3, 2])), scale, name="scores")
    if dims.attn_softcap:  # Gemma-2: cap * tanh(scores / cap) before the mask
        cap = b.const(np.array(dims.attn_softcap, NUMPY_DTYPES[dtype]), "softcap")
        scores = soft_cap(b, scores, cap, "softcapped")
    probs = b.op("Softmax", b.op("Add", scores, steps.biases[layer.window]), axis=-1)
    y = b.op("Transpose", b.op("MatMul", probs, values), perm=[0, 2, 1, 3], name="y_bsnh")
    y = b.op("Reshape", y, b.const([0, 0, dims.num_heads * layer.head_dim], "y_flat", "int64"))
    return y, LayerKV(present_k, present_v, keys, values)
