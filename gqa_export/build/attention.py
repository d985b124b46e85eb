"""Attention blocks. Mode `gqa`: com.microsoft.GroupQueryAttention with packed QKV and fused RoPE.

Facts this relies on (../shared/reference/ort-ops.md §1):
- GQA takes `seqlens_k` = int32(ReduceSum(mask) - 1) of shape (B,) and `total_sequence_length`
  = int32 scalar mask.shape[1]; positions for fused RoPE come from seqlens_k, so no
  `position_ids` input is needed (§1.5).
- With past and present bound to one max_length buffer, the kernel writes the new rows in place
  at seqlens_k+1-S (§1.4); ORT GenAI does the binding when `past_present_share_buffer` is true.
- Packed QKV goes in as `query` with `key`/`value` omitted (§1.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.build.dims import ModelDims
from gqa_export.build.graph import GraphBuilder
from gqa_export.errors import InputError


@dataclass(frozen=True)
class AttentionContext:
    """Graph-wide values every layer's attention reads."""

    seqlens_k: ir.Value
    total_sequence_length: ir.Value
    cos_cache: ir.Value
    sin_cache: ir.Value


@dataclass(frozen=True)
class LayerAttention:
    """One layer's attention weights and per-layer attributes."""

    qkv: list[ir.Value]  # one packed [H, (Nq+2Nkv)*D] weight, or three
    qkv_bias: list[ir.Value]
    o: ir.Value
    o_bias: ir.Value | None
    local_window_size: int = -1
    softcap: float = 0.0


def check_gqa_dims(dims: ModelDims) -> None:
    """GQA's fused-RoPE limits (ort-ops.md §1.5), checked before any weight is read."""
    if dims.num_heads % dims.num_kv_heads:
        raise InputError(
            f"num_attention_heads {dims.num_heads} is not a multiple of num_key_value_heads {dims.num_kv_heads}"
        )
    if dims.head_dim % 16:
        raise InputError(
            f"head_dim {dims.head_dim} is not a multiple of 16, which GroupQueryAttention's fused RoPE requires"
        )
    if dims.rope.rotary_dim % 16 or dims.rope.rotary_dim > dims.head_dim:
        raise InputError(
            f"rotary dim {dims.rope.rotary_dim} must be a multiple of 16 and at most head_dim {dims.head_dim} "
            "for GroupQueryAttention's fused RoPE"
        )


def mask_context(b: GraphBuilder, attention_mask: ir.Value, cos: ir.Value, sin: ir.Value) -> AttentionContext:
    """seqlens_k and total_sequence_length computed in-graph from the 2-D attention mask."""
    with b.scope("attn_mask"):
        total = b.op("ReduceSum", attention_mask, b.const([1], "axes", "int64"), keepdims=0)
        seqlens = b.op("Cast", b.op("Sub", total, b.const(1, "one", "int64")), to=ir.DataType.INT32)
        length = b.op("Gather", b.op("Shape", attention_mask), b.const(1, "axis1", "int64"), axis=0)
        total_len = b.op("Cast", length, to=ir.DataType.INT32, name="total_sequence_length")
    return AttentionContext(seqlens, total_len, cos, sin)


def linear(b: GraphBuilder, x: ir.Value, weight: ir.Value, bias: ir.Value | None, name: str) -> ir.Value:
    y = b.op("MatMul", x, weight, name=f"{name}/MatMul")
    return b.op("Add", y, bias, name=f"{name}/Add") if bias is not None else y


def gqa_attention(
    b: GraphBuilder,
    x: ir.Value,
    layer: LayerAttention,
    ctx: AttentionContext,
    past_key: ir.Value,
    past_value: ir.Value,
    dims: ModelDims,
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Returns (attention output after o_proj, present_key, present_value)."""
    if len(layer.qkv) == 1:
        bias = layer.qkv_bias[0] if layer.qkv_bias else None
        q, k, v = linear(b, x, layer.qkv[0], bias, "qkv_proj"), None, None
    else:
        biases = layer.qkv_bias or [None, None, None]
        q, k, v = (
            linear(b, x, w, bb, n) for w, bb, n in zip(layer.qkv, biases, ("q_proj", "k_proj", "v_proj"), strict=True)
        )
    out, present_k, present_v = b.op_multi(
        "GroupQueryAttention",
        q,
        k,
        v,
        past_key,
        past_value,
        ctx.seqlens_k,
        ctx.total_sequence_length,
        ctx.cos_cache,
        ctx.sin_cache,
        domain="com.microsoft",
        outputs=3,
        num_heads=dims.num_heads,
        kv_num_heads=dims.num_kv_heads,
        scale=dims.attention_scale,
        do_rotary=1,
        rotary_interleaved=0,
        local_window_size=layer.local_window_size,
        softcap=layer.softcap,
    )
    return linear(b, out, layer.o, layer.o_bias, "o_proj"), present_k, present_v
