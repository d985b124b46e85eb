"""Ungated experts whose outputs each pass their own learned RMSNorm before the weighted sum
(MoeNames.expert_norm: Ergo's experts.post_expert_norm [E, H], docs/coverage.md's Ergo section).

y = sum_e w_e * n_e * rms(down_e(act(up_e x))), rms(z) = z / sqrt(mean(z^2) + eps), n_e the expert's
norm weight and w_e the dense routing weight (zero off the chosen experts, graph/moe.py). The norm
sits between each expert's down projection and its weight, so the weighted sum cannot be folded into
one MatMul over every expert's hidden units as graph/ungated_experts.py does, nor run by
com.microsoft.MoE: the op sums its experts' fc2 outputs inside the kernel, and a per-expert RMSNorm
is not linear in them (the kernels also have no squared ReLU). Here every expert runs on every token
as two batched MatMuls over the stored [E, H, I] / [E, I, H] weights (x @ up_e, then @ down_e: the
checkpoint's layout is already MatMul's, in before out), the RMSNorm over each expert's [H] row, and
the routing weights then sum them: E / k times the compute of a sparse kernel, exact for any routing.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.weightless_rms import weightless_rms
from gqa_export.model.moe import MoeDims

B, S = "batch_size", "sequence_length"


def _stored(lc: LayerContext, prefix: str, moe: MoeDims) -> tuple[str, str]:
    """The (up [E, H, I], down [E, I, H]) tensors of the spec's first spelling this layer holds, shapes checked."""
    store, H = lc.params.store, lc.dims.hidden_size
    E, I = moe.experts, moe.intermediate  # noqa: E741
    for up, down in lc.spec.moe.names.ungated:  # type: ignore[union-attr]
        names = (lc.name(f"{prefix}{up}", suffix=""), lc.name(f"{prefix}{down}", suffix=""))
        if names[0] in store:
            for name, shape in zip(names, ((E, H, I), (E, I, H)), strict=True):
                if name not in store or tuple(store.info(name).shape) != shape:
                    found = tuple(store.info(name).shape) if name in store else "nothing"
                    raise InputError(f"{name}: expected {shape} ({E} experts, {H} wide, {I} inside), found {found}")
            return names
    raise InputError(f"layer {lc.i}: no expert weights under '{lc.name(prefix, suffix='')}' in the checkpoint")


def normed_experts(lc: LayerContext, x: ir.Value, weights_dense: ir.Value, moe: MoeDims, prefix: str) -> ir.Value:
    """sum_e w_e * rms_norm_e(down_e(act(up_e x))) [B,S,H] for x [B,S,H] and dense weights [B,S,E]."""
    b, params, H = lc.b, lc.params, lc.dims.hidden_size
    names = lc.spec.moe.names  # type: ignore[union-attr]
    assert names.expert_norm is not None
    up, down = _stored(lc, prefix, moe)
    norm = lc.name(f"{prefix}{names.expert_norm}")
    if tuple(params.store.info(norm).shape) != (moe.experts, H):
        raise InputError(f"{norm}: expected ({moe.experts}, {H}), found {tuple(params.store.info(norm).shape)}")
    with b.scope("experts"):
        rows = b.op("Unsqueeze", x, b.const([2, 3], "expert_axes", "int64"))  # [B,S,1,1,H]
        h = b.op("MatMul", rows, b.initializer(up, params.tensor(up)), name="up_each")  # [B,S,E,1,I]
        y = b.op("MatMul", activation(lc, h), b.initializer(down, params.tensor(down)), name="down_each")
        y = b.op("Squeeze", y, b.const([3], "row_axis", "int64"))  # [B,S,E,H]
        y = weightless_rms(b, y, H, params.dtype, lc.dims.rms_eps, "expert_rms", "expert_norm_ones")  # each row
        y = b.op("Mul", y, b.initializer(norm, params.tensor(norm)), name="expert_norm")  # [E,H]
        return typed(routed_sum(b, y, weights_dense), params.dtype, [B, S, H])


def routed_sum(b: GraphBuilder, y: ir.Value, weights_dense: ir.Value) -> ir.Value:
    """sum_e w_e * y_e [B,S,W] of every expert's output y [B,S,E,W] under the dense routing weights [B,S,E] (zero off
    the chosen experts): the plain-op experts' last step, after a per-expert op no fused kernel applies."""
    weighted = b.op("Mul", y, b.op("Unsqueeze", weights_dense, b.const([-1], "last", "int64")), name="weighted")
    return b.op("ReduceSum", weighted, b.const([2], "expert_axis", "int64"), keepdims=0, name="expert_sum")
