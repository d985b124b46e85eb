"""Gated experts run at a pooled width, each expert's output through one shared norm before the weighted
sum (Muse-Spark's MuseSparkMoE: MoeNames.latent with a gated MoeSpec activation, MoeNames.latent_norm,
MoeSpec.expert_norm_form "shared_input_scaled"; docs/coverage.md's Muse-Spark section).

The block's input x [B,S,H] is pooled to the experts' width D by latent[0] (a Linear [D, H]) and normed
there (latent_norm: the family's norm, (1 + w) at the config's rms_norm_eps for Muse-Spark). Every expert
e then computes y_e = down_e(silu(gate_e z) * up_e z) from the fused gate_up [E, 2I, D] (its [gate | up]
halves) and down [E, D, I]; y_e passes the shared input-scaled norm rms(y_e * (1 + w)) (w [D], at the
post-block norms' eps, graph/input_scaled_norm.py); the dense routing weights w_e [B,S,E] (zero off the
chosen experts, graph/dense_routing.py) sum them; latent[1] (a Linear [H, D]) unpools the sum.

Why plain ops: the norm sits between each expert's down projection and its routing weight, and
com.microsoft.MoE sums its experts' fc2 outputs inside the kernel; a norm of each is not linear in them.
So every expert runs on every token as two batched MatMuls over the stored weights, transposed once at
export to MatMul's [E, D, 2I] / [E, I, D]: E / k times the compute of a sparse kernel, exact for any routing.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import typed
from gqa_export.graph.experts import check_expert_shapes
from gqa_export.graph.input_scaled_norm import input_scaled_norm
from gqa_export.graph.normed_experts import routed_sum
from gqa_export.model.moe import MoeDims

B, S = "batch_size", "sequence_length"


def _stored(lc: LayerContext, prefix: str, moe: MoeDims, width: int) -> tuple[str, str]:
    """The (gate_up [E, 2I, D], down [E, D, I]) tensors of the spec's first fused spelling this layer holds."""
    store = lc.params.store
    E, I = moe.experts, moe.intermediate  # noqa: E741
    for gate_up, down in lc.spec.moe.names.fused:  # type: ignore[union-attr]
        names = (lc.name(f"{prefix}{gate_up}", suffix=""), lc.name(f"{prefix}{down}", suffix=""))
        if names[0] in store and names[1] in store:
            expected = {names[0]: (E, 2 * I, width), names[1]: (E, width, I)}
            check_expert_shapes(store, expected, f"layer {lc.i}", f"{E} experts, {I} inside, pooled to {width}")
            return names
    raise InputError(f"layer {lc.i}: no fused expert weights under '{lc.name(prefix, suffix='')}' in the checkpoint")


def pooled_experts(lc: LayerContext, x: ir.Value, weights_dense: ir.Value, moe: MoeDims, prefix: str) -> ir.Value:
    """unpool(sum_e w_e * norm(expert_e(pool_norm(pool(x))))) [B,S,H] for x [B,S,H], dense weights [B,S,E]."""
    b, params, dims = lc.b, lc.params, lc.dims
    spec = lc.spec.moe
    assert spec is not None and spec.names.latent is not None
    names = spec.names
    pool, unpool = (f"{prefix}{n}" for n in names.latent)
    width = int(params.store.info(lc.name(pool)).shape[0])  # D: moe_hidden_size
    gate_up, down = _stored(lc, prefix, moe, width)
    I = moe.intermediate  # noqa: E741
    with b.scope("pooled_experts"):
        z = linear(lc, x, [pool], None, "pre_expert_proj")
        if names.latent_norm is not None:
            z = normalize(b, z, lc.name(f"{prefix}{names.latent_norm}"), params, dims, "pre_expert_norm", width)
        rows = b.op("Unsqueeze", z, b.const([2, 3], "expert_axes", "int64"))  # [B,S,1,1,D]
        gu = params.derived(gate_up, lambda w: w.transpose(0, 2, 1), (moe.experts, width, 2 * I))
        h = b.op("MatMul", rows, b.initializer(gate_up, gu), name="gate_up_each")  # [B,S,E,1,2I]
        gate, up = b.op_multi("Split", h, b.const([I, I], "halves", "int64"), axis=-1, outputs=2, name="halves")
        inner = b.op("Mul", activation(lc, gate), up, name="gated")
        dn = params.derived(down, lambda w: w.transpose(0, 2, 1), (moe.experts, I, width))
        y = b.op("MatMul", inner, b.initializer(down, dn), name="down_each")  # [B,S,E,1,D]
        y = b.op("Squeeze", y, b.const([3], "row_axis", "int64"))  # [B,S,E,D]
        if names.expert_norm is not None:
            assert spec.expert_norm_form == "shared_input_scaled", spec.expert_norm_form
            eps = dims.rms_eps if dims.post_block_eps is None else dims.post_block_eps
            norm = lc.name(f"{prefix}{names.expert_norm}")
            y = input_scaled_norm(b, y, norm, params, eps, dims.norm_offset, "post_expert_norm", width)
        pooled = typed(routed_sum(b, y, weights_dense), params.dtype, [B, S, width])
        out = linear(lc, pooled, [unpool], None, "post_expert_proj")
        return typed(out, params.dtype, [B, S, dims.hidden_size])
