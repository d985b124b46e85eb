"""Learned affine maps on the residual stream (ZAYA1, docs/coverage.md's ZAYA section).

- The embedding: (e + bias) * scale before the first layer (the decoder root's
  input_hidden_states_bias / _scale).
- Each residual add: (block + hidden_states_bias) * hidden_states_scale + (residual + residual_bias)
  * residual_scale, one module per add (post_attention_residual_scale, post_mlp_residual_scale).
HF keeps this stream in float32 whatever the model's dtype; the graph keeps it in the export dtype.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.params import Params

B, S = "batch_size", "sequence_length"


def input_affine(b: GraphBuilder, h: ir.Value, spec: ArchSpec, params: Params, width: int) -> ir.Value:
    """(h + bias) * scale where the spec names the decoder root's pair (ArchSpec.input_affine)."""
    if spec.input_affine is None:
        return h
    bias_name, scale_name = (spec.tensor(n) for n in spec.input_affine)
    bias = b.initializer(bias_name, params.vector([bias_name]))
    scale = b.initializer(scale_name, params.vector([scale_name]))
    out = b.op("Mul", b.op("Add", h, bias, name="input_bias"), scale, name="input_scale")
    return typed(out, params.dtype, [B, S, width])


def affine_residual(lc: LayerContext, module: str, h: ir.Value, y: ir.Value, name: str) -> ir.Value:
    """(y + hidden_states_bias) * hidden_states_scale + (h + residual_bias) * residual_scale."""
    b, params = lc.b, lc.params

    def affine(x: ir.Value, side: str) -> ir.Value:
        bias_name, scale_name = (lc.name(module, f"{side}_{kind}") for kind in ("bias", "scale"))
        bias = b.initializer(bias_name, params.vector([bias_name]))
        scale = b.initializer(scale_name, params.vector([scale_name]))
        return b.op("Mul", b.op("Add", x, bias, name=f"{name}_{side}_bias"), scale, name=f"{name}_{side}_scale")

    out = b.op("Add", affine(y, "hidden_states"), affine(h, "residual"), name=name)
    return typed(out, params.dtype, [B, S, lc.dims.hidden_size])
