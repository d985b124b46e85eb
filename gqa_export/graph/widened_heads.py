"""Attention whose cache heads are wider than its projections' (model/layer_ropes.projected_head_dim):
DiffLlama's differential attention (graph/differential.py) and Doge's dynamic mask attention
(graph/dynamic_mask.py), each a GroupQueryAttention over padded q/k and rewritten values. A rotary width
GQA's fused RoPE cannot take (not a multiple of 16: projections' heads of 8 or 24) is applied by plain ops to
the projections' heads before their padding (`table`)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.differential import differential_output, differential_qkv
from gqa_export.graph.dynamic_mask import dynamic_output, dynamic_qkv


def widened(lc: LayerContext) -> bool:
    return bool(lc.spec.differential_attention or lc.spec.dynamic_key_bias)


def widened_qkv(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """GroupQueryAttention's q, k and v for the wide heads; `table`: the (cos, sin) of RoPE by plain ops, None
    where GQA rotates (fused)."""
    return differential_qkv(lc, x, table) if lc.spec.differential_attention else dynamic_qkv(lc, x, table)


def widened_output(lc: LayerContext, out: ir.Value) -> ir.Value:
    """The wide heads' output back to [B,S,Nq*D] for o_proj."""
    return differential_output(lc, out) if lc.spec.differential_attention else dynamic_output(lc, out)
