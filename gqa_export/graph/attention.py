"""Attention blocks. Mode `gqa`: com.microsoft.GroupQueryAttention with packed QKV and fused RoPE.

Facts this relies on (docs/ort-ops.md §1):
- GQA takes `seqlens_k` = int32(ReduceSum(mask) - 1) of shape (B,) and `total_sequence_length`
  = int32 scalar mask.shape[1]; positions for fused RoPE come from seqlens_k, so no
  `position_ids` input is needed (docs/ort-ops.md §1.4).
- With past and present bound to one max_length buffer, the kernel writes the new rows in place
  at seqlens_k+1-S (docs/ort-ops.md §1.5); ORT GenAI does the binding when
  `past_present_share_buffer` is true.
- Packed QKV goes in as `query` with `key`/`value` omitted (docs/ort-ops.md §1.1).
- `local_window_size` = W attends W keys including the current one, HF's `sliding_window`
  (ORT >= 1.23, docs/ort-ops.md §1.7); `softcap` is applied before the mask, as in Gemma-2
  (docs/ort-ops.md §1.9).
- q_norm/k_norm inputs of GQA are CUDA/WebGPU-only (docs/ort-ops.md §1.1, §1.10), so q/k RMSNorms
  are separate nodes.
- Per-layer head_dim / kv heads (Gemma-4) are per-node attributes; the KV inputs carry concrete dims.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.model.dims import LayerDims, ModelDims


@dataclass(frozen=True)
class AttentionContext:
    """Graph-wide values every layer's attention reads."""

    seqlens_k: ir.Value
    total_sequence_length: ir.Value
    rope_caches: dict[str, tuple[ir.Value, ir.Value]]  # rope key -> (cos_cache, sin_cache)


def gqa_refusal(dims: ModelDims, with_bias: bool = False) -> str | None:
    """Why GroupQueryAttention cannot run this model, or None. GQA itself needs head_size % 8 (its
    CPU helper); rotary dims its fused RoPE refuses are applied with plain ops before it instead
    (`rotary.fused_rope_ok`). ALiBi's per-head score bias is not a GQA input (docs/architecture.md §2.3).
    Chunked attention is no fixed window: only a bias masks it (`with_bias`, GQA's attention_bias
    input, docs/llama4.md)."""
    chunked = next((layer for layer in dims.layers if layer.chunk > 0), None)
    if chunked is not None and not with_bias:
        return (
            f"layer {chunked.index} attends within chunks of {chunked.chunk} positions (attention_chunk_size), "
            "which GroupQueryAttention (mode gqa, and split's decode graph) cannot mask; export with --attention "
            "bias (standard Attention, same shared KV buffer)"
        )
    if dims.alibi:
        return (
            f"{dims.model_type}'s ALiBi position bias is a per-head additive score bias GroupQueryAttention "
            "cannot take; export with --attention bias (standard Attention, same shared KV buffer)"
        )
    for layer in dims.layers:
        if layer.head_dim % 8:
            return (
                f"head_dim {layer.head_dim} is not a multiple of 8, which GroupQueryAttention requires "
                f"(layer {layer.index}); export with --attention bias (standard Attention, same shared KV buffer)"
            )
    return None


def check_gqa_dims(dims: ModelDims, with_bias: bool = False) -> None:
    """GQA's limits, checked before any weight is read."""
    why = gqa_refusal(dims, with_bias)
    if why is not None:
        raise InputError(why)


def gqa_mask_values(b: GraphBuilder, attention_mask: ir.Value) -> tuple[ir.Value, ir.Value]:
    """seqlens_k and total_sequence_length computed in-graph from the 2-D attention mask."""
    with b.scope("attn_mask"):
        total = b.op("ReduceSum", attention_mask, b.const([1], "axes", "int64"), keepdims=0)
        seqlens = b.op("Cast", b.op("Sub", total, b.const(1, "one", "int64")), to=ir.DataType.INT32)
        length = b.op("Gather", b.op("Shape", attention_mask), b.const(1, "axis1", "int64"), axis=0)
        total_len = b.op("Cast", length, to=ir.DataType.INT32, name="total_sequence_length")
    return seqlens, total_len


def gqa(
    b: GraphBuilder,
    qkv: tuple[ir.Value, ir.Value | None, ir.Value | None],
    past: tuple[ir.Value, ir.Value],
    ctx: AttentionContext,
    dims: ModelDims,
    layer: LayerDims,
    window_cache: bool = False,
    bias: ir.Value | None = None,
    sinks: ir.Value | None = None,
    fused_rope: bool = True,
    additive: bool = False,
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """One GroupQueryAttention node; returns (output [B,S,Nq*D], present_key, present_value).

    window_cache: `sliding_window_cache=1` (ORT >= 1.31) on a windowed layer, so its past/present
    may be a window-sized buffer that the kernel keeps compacted; ORT GenAI sizes those layers'
    buffers from the config's `decoder.sliding_window` (docs/ortgenai.md §3.5, docs/ort-ops.md §1.8).

    A KV-shared layer passes only its query: GQA's shared-KV mode (ORT 1.31, docs/gemma4.md §3.1) takes
    zero-length key/value, reads `past` (the producer's present outputs) as the whole cache,
    appends nothing and rotates only Q; it has no present outputs.

    bias: an additive [B,1,S,T] attention_bias (CPU GQA only; CUDA routes it to its unfused
    kernel) that carries causality, padding, the window and bidirectional runs: `causal=0` so that
    it can unmask later keys of a run, and local_window_size -1 (the schema requires it with
    causal=0), the window being in the bias (docs/gemma4.md §2.3).

    additive: the bias is a score bias only (Inkling's relative position bias, [B,Nq,S,T]): the op keeps
    causal=1 and its window, which mask on top of it (docs/ort-ops.md §1.9).

    sinks: per-head sink logits [Nq] (gpt-oss), GQA's `head_sink` input: each head's softmax gets
    exp(sink) added to its denominator (docs/ort-ops.md §1.1, §1.9)."""
    rotary = layer.rope is not None and fused_rope  # else RoPE was applied before GQA (rotary.py)
    cos, sin = ctx.rope_caches[layer.rope] if rotary else (None, None)
    query, key, value = qkv
    if layer.shares_kv:
        width = layer.num_kv_heads * layer.head_dim
        start = b.const([0, 0], "empty_kv_start", "int64")
        end = b.const([0, width], f"empty_kv_end{width}", "int64")
        key = value = b.op("Slice", query, start, end, b.const([1, 2], "empty_kv_axes", "int64"), name="empty_kv")
    outputs = b.op_multi(
        "GroupQueryAttention",
        query, key, value, past[0], past[1], ctx.seqlens_k, ctx.total_sequence_length, cos, sin, None, bias, sinks,
        domain="com.microsoft",
        outputs=1 if layer.shares_kv else 3,
        num_heads=dims.num_heads,
        kv_num_heads=layer.num_kv_heads,
        scale=dims.scale(layer),
        do_rotary=int(rotary),
        rotary_interleaved=int(rotary and dims.ropes[layer.rope].interleaved),
        local_window_size=layer.window if bias is None or additive else -1,
        causal=None if bias is None or additive else 0,
        softcap=dims.attn_softcap,
        sliding_window_cache=1 if window_cache and layer.window > 0 else None,
    )  # fmt: skip
    if layer.shares_kv:
        return outputs[0], None, None
    return outputs[0], outputs[1], outputs[2]
