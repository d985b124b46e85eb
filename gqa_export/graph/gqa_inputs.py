"""What a layer's GroupQueryAttention reads besides its projections: the sink logits, and q / k
rotated by plain ops where the op does not rotate them itself (graph/decoder.py's attention)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, rotated_heads


def rotated_qkv(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value]
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """q, k with RoPE applied by plain ops (for GQA with do_rotary=0) and flattened back to
    [B,S,N*D], v as projected (blocks.rotated_heads, the one rotation path)."""
    b = lc.b
    shaped = rotated_heads(lc, x, table, reshape_v=False)
    flat = b.const([0, 0, -1], "heads_flat", "int64")
    k4 = shaped.get("k")
    return b.op("Reshape", shaped["q"], flat), None if k4 is None else b.op("Reshape", k4, flat), shaped.get("v")


def attention_sinks(lc: LayerContext) -> ir.Value | None:
    """The per-head attention sink logits where the spec has them (gpt-oss: every layer; MiMo-V2-Flash:
    the sliding ones), stored under the first of its spellings the checkpoint holds."""
    module = lc.spec.attention_sinks
    if module is None or (lc.spec.attention_sink_layers == "sliding" and lc.layer.window <= 0):
        return None
    held = lc.held_spelling(module, suffix="") or module.split("|")[0]  # none held: the read names the first
    name = lc.name(held, suffix="")
    return lc.b.initializer(name, lc.params.vector([name]))
