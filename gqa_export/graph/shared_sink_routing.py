"""A sigmoid router whose shared experts are weighted beside the routed ones (Inkling's router with
shared_expert_sink, docs/coverage.md's Inkling section).

The router Linear has E + Ns rows: the routed experts' logits, then the shared experts'. The top k routed
experts are chosen on sigmoid(logit) + the selection bias; the k chosen and the Ns shared experts are then
weighted together, sigmoid(logit) / the sum of those k + Ns sigmoids (HF's softmax over their log-sigmoids),
times route_scale and the router's learned scalar. The routed weights go to the MoE op as dense weights
(graph/moe.py); the shared experts [Ns, I, H] run on every token, each output times its weight, as one
MatMul over their concatenated channels."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import gated
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.moe import MoeDims

GAMMAS = "shared_sink_gammas"  # the shared experts' weights [B,S,Ns], handed from the router to the shared experts


def shared_sink_routing(lc: LayerContext, prefix: str, logits: ir.Value, moe: MoeDims) -> ir.Value:
    """The routed experts' weights, dense [B,S,E] (zero off the top k); the shared experts' [B,S,Ns] are left
    in lc.carried for `sink_shared_experts` (the same layer's block, which runs next)."""
    b, dtype = lc.b, lc.params.dtype
    names = lc.spec.moe.names  # type: ignore[union-attr]
    assert lc.carried is not None
    E = moe.experts
    shared_count = moe.shared_intermediate // moe.intermediate
    with b.scope("shared_sink_router"):
        axis = b.const([-1], "last", "int64")
        routed = b.op("Slice", logits, b.const([0], "start", "int64"), b.const([E], "routed_end", "int64"), axis)
        shared = b.op(
            "Slice", logits, b.const([E], "shared_start", "int64"), b.const([E + shared_count], "end", "int64"), axis
        )
        scores = b.op("Sigmoid", routed, name="scores")
        choosing = scores
        bias_module = lc.held_spelling(names.expert_bias, prefix, suffix="")
        if bias_module is not None:
            bias_name = lc.name(bias_module, suffix="")
            choosing = b.op("Add", scores, b.initializer(bias_name, lc.params.vector([bias_name])), name="biased")
        _, chosen = b.op_multi("TopK", choosing, b.const([moe.top_k], "k", "int64"), axis=-1, outputs=2, name="topk")
        picked = b.op("Concat", b.op("GatherElements", scores, chosen, axis=-1), b.op("Sigmoid", shared), axis=-1)
        total = b.op("ReduceSum", picked, axis, keepdims=1, name="sink_sum")  # over the k chosen and the shared
        weights = b.op("Div", picked, total, name="normalized")
        factor = b.const(np.asarray(moe.routed_scaling, NUMPY_DTYPES[dtype]), "route_scale")
        weights = b.op("Mul", weights, factor, name="route_scaled")
        scale_name = lc.name(f"{prefix}{names.router_scale}", suffix="") if names.router_scale else None
        if scale_name is not None and scale_name in lc.params.store:
            scale = b.initializer(scale_name, lc.params.vector([scale_name]))
            weights = b.op("Mul", weights, scale, name="global_scaled")
        routed_weights, gammas = b.op_multi(
            "Split", weights, b.const([moe.top_k, shared_count], "split", "int64"), axis=-1, outputs=2
        )
        lc.carried[GAMMAS] = gammas
        zeros = b.op("Mul", scores, b.const(np.asarray(0, NUMPY_DTYPES[dtype]), "zero"))
        return b.op("ScatterElements", zeros, chosen, routed_weights, axis=-1, name="dense_weights")


def sink_shared_experts(lc: LayerContext, x: ir.Value, prefix: str) -> ir.Value:
    """sum_j gamma_j down_j(act(gate_j x) * up_j x) over the Ns shared experts [Ns, I, H] / [Ns, H, I]."""
    b, params, moe = lc.b, lc.params, lc.dims.moe
    names = lc.spec.moe.names  # type: ignore[union-attr]
    assert moe is not None and lc.carried is not None and names.shared_expert is not None
    gammas = lc.carried.pop(GAMMAS)
    if lc.spec.moe.router_dtype == "float32" and params.dtype != ir.DataType.FLOAT:  # type: ignore[union-attr]
        gammas = b.op("Cast", gammas, to=params.dtype, name="shared_gammas")  # routed in float32, weighted in ours
    width, count = moe.intermediate, moe.shared_intermediate // moe.intermediate
    module = f"{prefix}{names.shared_expert}"
    hidden = lc.dims.hidden_size
    with b.scope("shared_experts"):
        gate_name, up_name, down_name = (
            lc.name(f"{module}.{p}", suffix="") for p in ("gate_proj", "up_proj", "down_proj")
        )
        columns = (hidden, count * width)

        def inputs(name: str) -> ir.Value:  # [Ns, I, H] -> MatMul's [H, Ns I]
            return b.initializer(name, params.derived(name, lambda w: w.reshape(-1, hidden).T, shape=columns))

        gate = b.op("MatMul", x, inputs(gate_name), name="gate_proj")
        up = b.op("MatMul", x, inputs(up_name), name="up_proj")
        inner = b.op("Reshape", gated(lc, gate, up), b.const([0, 0, count, width], "per_expert", "int64"))
        inner = b.op("Mul", inner, b.op("Unsqueeze", gammas, b.const([-1], "last", "int64")), name="weighted")
        inner = b.op("Reshape", inner, b.const([0, 0, count * width], "flat", "int64"))
        down = b.initializer(
            down_name,
            params.derived(
                down_name, lambda w: w.transpose(0, 2, 1).reshape(-1, hidden), shape=(count * width, hidden)
            ),
        )
        return b.op("MatMul", inner, down, name="down_proj")
