"""The attention output gate: the heads' output [B,S,Nq*D] times act(gate) before o_proj.

The gate is Qwen3.5's half of q_proj (graph/blocks.py leaves it in LayerContext.output_gate) or a
Linear of the layer's normed input the checkpoint holds (LayerNames.output_gate: AFMoE's gate_proj,
Laguna's, LFM3's, Ling 3's and dots3-note's g_proj). act is the spec's output_gate_activation: sigmoid
(Qwen3.5, AFMoE, Ling 3) or softplus (Laguna). A gate Linear with one row per query head (Laguna's
gating "per-head"; Ling 3's and dots3-note's, before the latent output drops the padded value channels,
which the per-head factor leaves zero) scales each head's
D channels by one value; one with a row per channel scales each channel (docs/coverage.md §9).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear

ACTIVATIONS = {"sigmoid": "Sigmoid", "softplus": "Softplus"}


def gated_output(lc: LayerContext, x: ir.Value, out: ir.Value) -> ir.Value:
    """`out` times the activated gate, or `out` unchanged where the layer has no gate."""
    b, module = lc.b, lc.spec.layer.output_gate
    gate = lc.output_gate.get("gate")
    own = gate is None and module is not None and lc.has(module)
    if own:  # the layer's own gate Linear
        gate = linear(lc, x, [module], None, "gate_proj")  # type: ignore[list-item]
    if gate is None:
        return out
    activated = b.op(ACTIVATIONS[lc.spec.output_gate_activation], gate)
    heads, d = lc.dims.num_heads, lc.layer.head_dim
    if not own or int(lc.params.store.info(lc.name(module)).shape[0]) != heads:  # type: ignore[arg-type]
        return b.op("Mul", out, activated, name="output_gate")
    # one gate per head, over its D channels
    per_head = b.op("Reshape", out, b.const([0, 0, heads, d], "heads_shape", "int64"))
    scaled = b.op("Mul", per_head, b.op("Unsqueeze", activated, b.const([-1], "last_axis", "int64")))
    return b.op("Reshape", scaled, b.const([0, 0, heads * d], "flat_shape", "int64"), name="output_gate")
