"""The attention output gate: the heads' output [B,S,Nq*D] times act(gate) before o_proj.

The gate is Qwen3.5's half of q_proj (graph/blocks.py leaves it in LayerContext.output_gate) or a
Linear of the layer's normed input the checkpoint holds (LayerNames.output_gate: AFMoE's gate_proj,
Laguna's, LFM3's, Ling 3's and dots3-note's g_proj). act is the spec's output_gate_activation: sigmoid
(Qwen3.5, AFMoE, Ling 3) or softplus (Laguna). A gate Linear with one row per query head (Laguna's
gating "per-head"; Ling 3's and dots3-note's, before the latent output drops the padded value channels,
which the per-head factor leaves zero) scales each head's
D channels by one value; one with a row per channel scales each channel (docs/coverage.md §9), its
pre-activation plus a per-head bias where the spec names one (LayerNames.output_gate_bias: Beam's
gate_bias, one value over each head's D channels).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.ngpt_scales import squared, stored_scaled

ACTIVATIONS = {"sigmoid": "Sigmoid", "softplus": "Softplus"}


def gated_output(lc: LayerContext, x: ir.Value, out: ir.Value) -> ir.Value:
    """`out` times the activated gate, or `out` unchanged where the layer has no gate."""
    b, module = lc.b, lc.spec.layer.output_gate
    gate = lc.output_gate.get("gate")
    own = gate is None and module is not None and lc.has(module)
    if own:  # the layer's own gate Linear
        gate = linear(lc, x, [module], None, "gate_proj")  # type: ignore[list-item]
        if lc.spec.ngpt is not None and lc.dims.ngpt is not None:  # nGPT: times (s_gate x c) ** 2
            factor = lc.dims.ngpt.gate_scale(lc.dims.hidden_size)
            gate = stored_scaled(lc.b, gate, lc.params, lc.name(lc.spec.ngpt.gate_scale, ""), squared(factor), "s_gate")
    if gate is None:
        return out
    heads, d = lc.dims.num_heads, lc.layer.head_dim
    if own:
        gate = _head_biased(lc, gate, heads, d)
    activated = b.op(ACTIVATIONS[lc.spec.output_gate_activation], gate)
    if not own or int(lc.params.store.info(lc.name(module)).shape[0]) != heads:  # type: ignore[arg-type]
        return b.op("Mul", out, activated, name="output_gate")
    # one gate per head, over its D channels
    per_head = b.op("Reshape", out, b.const([0, 0, heads, d], "heads_shape", "int64"))
    scaled = b.op("Mul", per_head, b.op("Unsqueeze", activated, b.const([-1], "last_axis", "int64")))
    return b.op("Reshape", scaled, b.const([0, 0, heads * d], "flat_shape", "int64"), name="output_gate")


def _head_biased(lc: LayerContext, gate: ir.Value, heads: int, d: int) -> ir.Value:
    """A per-channel gate [B,S,Nq*D] plus its per-head bias [Nq] over each head's D channels, where
    the spec names one and the checkpoint holds it (Beam's gate_bias); else the gate unchanged."""
    module = lc.spec.layer.output_gate_bias
    if module is None or not lc.has(module, suffix=""):
        return gate
    b, name = lc.b, lc.name(module, suffix="")
    bias = b.initializer(name, lc.params.derived(name, lambda v: v.reshape(heads, 1), (heads, 1)))  # [Nq, 1]
    per_head = b.op("Reshape", gate, b.const([0, 0, heads, d], "gate_heads_shape", "int64"))
    biased = b.op("Add", per_head, bias, name="gate_bias")  # [B,S,Nq,D] + [Nq,1]
    return b.op("Reshape", biased, b.const([0, 0, heads * d], "gate_flat_shape", "int64"), name="gate_biased")
