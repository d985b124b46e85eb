"""Values narrower than keys in ordinary attention (MiMo-V2-Flash: v_head_dim 128 beside a
head_dim of 192; `ModelDims.value_head_dim`).

GroupQueryAttention and onnxruntime-genai size key and value buffers with one head size, so each
kv head's value is zero-padded to head_dim before attention (the cache holds the zeros) and each
query head's output keeps its first v_head_dim channels before o_proj, which reads heads x
v_head_dim inputs. Zero channels add nothing to a weighted sum of values: the kept channels are the
narrow attention's exactly. The same layout as latent attention's expanded cache
(graph/latent_attention.py)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder


def padded_values(b: GraphBuilder, v: ir.Value, kv_heads: int, width: int, head_dim: int) -> ir.Value:
    """v [B,S,kv_heads*width] -> [B,S,kv_heads*head_dim], each head's channels past width zero."""
    if not width or width == head_dim:
        return v
    heads = b.op("Reshape", v, b.const([0, 0, kv_heads, width], "v_narrow_heads", "int64"))
    pads = b.const([0, 0, 0, 0, 0, 0, 0, head_dim - width], "v_pads", "int64")
    padded = b.op("Pad", heads, pads, name="v_pad")
    return b.op("Reshape", padded, b.const([0, 0, kv_heads * head_dim], "v_padded_flat", "int64"))


def zero_padded_heads(
    b: GraphBuilder, per_head: ir.Value, heads: int, width: int, extra: int, tag: str, kind: str
) -> ir.Value:
    """per_head [B,S,heads,width] -> [B,S,heads*(width+extra)], each head followed by `extra` zero
    channels: the one head size GroupQueryAttention takes, for mechanisms that widen q and k
    (differential attention's second half, the dynamic mask's key-bias channels). Nodes named
    `{tag}_{kind}_pad` / `{tag}_{kind}_flat`."""
    pads = b.const([0, 0, 0, 0, 0, 0, 0, extra], f"{kind}_pads", "int64")
    padded = b.op("Pad", per_head, pads, name=f"{tag}_{kind}_pad")
    return b.op("Reshape", padded, b.const([0, 0, heads * (width + extra)], f"{tag}_{kind}_flat", "int64"))


def narrowed_output(b: GraphBuilder, y: ir.Value, heads: int, width: int, head_dim: int) -> ir.Value:
    """The attention output [B,S,heads*head_dim] without the padded channels: [B,S,heads*width]."""
    if not width or width == head_dim:
        return y
    per_head = b.op("Reshape", y, b.const([0, 0, heads, head_dim], "out_heads", "int64"))
    kept = b.op(
        "Slice", per_head, b.const([0], "zero_start", "int64"), b.const([width], "v_end", "int64"),
        b.const([-1], "last_axis", "int64"), name="drop_v_padding",
    )  # fmt: skip
    return b.op("Reshape", kept, b.const([0, 0, heads * width], "out_flat", "int64"))
