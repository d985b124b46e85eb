"""A weightless RMSNorm over each head's attention output before the output gate (ArchSpec.head_output_norm:
Muse-Spark's self_attn.o_norm, MuseSparkRMSNorm(with_scale=False) at the config's rms_norm_eps).

The heads' output [B,S,N*D] is normed over each head's D channels, fp32 inside, then flattened back; the
output gate (graph/output_gate.py) and o_proj follow.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, head_norm


def head_output_norm(lc: LayerContext, out: ir.Value) -> ir.Value:
    """`out` [B,S,N*D] with each head's D channels through a weightless RMSNorm."""
    b, heads, d = lc.b, lc.dims.num_heads, lc.layer.head_dim
    per_head = b.op("Reshape", out, b.const([0, 0, heads, d], "o_norm_heads", "int64"))
    normed = head_norm(lc, per_head, None, "o_norm", heads)
    return b.op("Reshape", normed, b.const([0, 0, heads * d], "o_norm_flat", "int64"), name="o_norm_out")
