"""The dense MLP block: down(act(gate(x)) * up(x)) (gate and up as one MatMul and a Split, or two), the
plain down(act(up(x))), and a stored packed [gate | up] Linear (Granite-4.0-H's shared MLP)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.activations import activation, gated
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.limited_swiglu import shared_gated
from gqa_export.graph.ngpt_scales import stored_scaled, times
from gqa_export.graph.sparse_activation import gaussian_top_k


def mlp_block(lc: LayerContext, x: ir.Value) -> ir.Value:
    """down(act(gate(x)) * up(x)); gate and up run as one MatMul split after, or as two where the
    graph options say so (a checkpoint's stored gate_up stays one). A plain MLP
    (spec mlp "plain": Phi-2, StarCoder2, Nemotron, Apertus) is down(act(up(x)))."""
    L, b = lc.spec.layer, lc.b
    if lc.spec.mlp == "plain":
        return _down(lc, activation(lc, linear(lc, x, [L.up], None, "up_proj")))
    if not L.gate_up and not lc.packed_gate_up:  # two MatMuls and no Split (GraphOptions.packed_gate_up)
        gate, up = linear(lc, x, [L.gate], None, "gate_proj"), linear(lc, x, [L.up], None, "up_proj")
    else:  # the stored gate_up, or gate and up packed (named in the MLP's own module)
        packed = None if L.gate_up else f"{L.gate.rpartition('.')[0]}.gate_up_proj"
        gate_up = linear(lc, x, [L.gate_up] if L.gate_up else [L.gate, L.up], packed, "gate_up_proj")
        width = lc.layer.intermediate_size
        split = b.const([width, width], "split", "int64")
        gate, up = b.op_multi("Split", gate_up, split, axis=-1, outputs=2)
    if lc.spec.ngpt is not None and lc.dims.ngpt is not None:  # nGPT: gate and up times suv x sqrt(hidden)
        factor = lc.dims.hidden_size**0.5
        gate = stored_scaled(b, gate, lc.params, lc.name(lc.spec.ngpt.mlp_gate_scale, ""), times(factor), "suv_gate")
        up = stored_scaled(b, up, lc.params, lc.name(lc.spec.ngpt.mlp_up_scale, ""), times(factor), "suv_up")
    if lc.layer.activation_sparsity:  # Gemma-3n: only the gate's channels above a gaussian cutoff
        gate = gaussian_top_k(b, gate, lc.layer.activation_sparsity, lc.params.dtype)
    if lc.spec.moe is not None and lc.spec.moe.dense_limited:  # Step3p7: clipped at the layer's shared limit
        return _down(lc, shared_gated(lc, gate, up))
    return _down(lc, gated(lc, gate, up))


def _down(lc: LayerContext, inner: ir.Value) -> ir.Value:
    """down_proj, after the spec's norm over its input where it names one (BitNet's ffn_sub_norm)."""
    module = lc.spec.layer.mlp_inner_norm
    if module is not None:
        width = lc.layer.intermediate_size
        inner = normalize(lc.b, inner, lc.name(module), lc.params, lc.dims, "sub_norm", width)
    return linear(lc, inner, [lc.spec.layer.down], None, "down_proj")


def gated_mlp(lc: LayerContext, x: ir.Value, gate_up: str, down: str, width: int) -> ir.Value:
    """down(act(gate) * up) from a stored packed [gate | up] Linear of 2 * width rows (Granite-4.0-H's
    shared_mlp input_linear / output_linear)."""
    b = lc.b
    gate, up = b.op_multi(
        "Split",
        linear(lc, x, [gate_up], None, "gate_up"),
        b.const([width, width], "split", "int64"),
        axis=-1,
        outputs=2,
    )
    return linear(lc, b.op("Mul", activation(lc, gate), up), [down], None, "down")
