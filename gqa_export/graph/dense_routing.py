"""Routers whose expert weights the graph computes itself, dense [B, S, E] (zero off the chosen experts),
instead of the MoE op's own softmax top-k: PhiMoE's sparsemixer and the choices on biased scores or
logits (DeepSeek-V3-style selection biases, Laguna's soft-capped logits, Kolibri-1's logits + bias).
graph/moe.py hands them to the op as its router input."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import soft_cap
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.grouped_routing import GROUPED_ROUTINGS, grouped_routing
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.shared_sink_routing import shared_sink_routing
from gqa_export.graph.stream_router import skip_expert_routing
from gqa_export.model.moe import MoeDims


def _sparsemixer(b: GraphBuilder, logits: ir.Value, jitter: float, dtype: ir.DataType) -> ir.Value:
    """PhiMoE's eval-mode sparsemixer as dense weights [B,S,E] (docs/moe.md §8): the top expert's weight
    is its softmax among the scores within 2*jitter (relative) of the max; the second is the same
    over the scores without the first, the relative distance measured on the original scores."""
    with b.scope("sparsemixer"):
        last = b.const([-1], "last", "int64")
        lowest = b.const(np.asarray(-np.inf, NUMPY_DTYPES[dtype]), "minus_inf")
        eps2 = b.const(np.asarray(2 * jitter, NUMPY_DTYPES[dtype]), "two_eps")
        magnitude = b.op("Abs", logits)

        def pick(scores: ir.Value, tag: str) -> tuple[ir.Value, ir.Value]:
            top = b.op("ReduceMax", scores, last, keepdims=1, name=f"max{tag}")
            index = b.op("ArgMax", scores, axis=-1, keepdims=1, name=f"argmax{tag}")
            far = b.op("Greater", b.op("Div", b.op("Sub", top, logits), b.op("Max", magnitude, top)), eps2)
            probs = b.op("Softmax", b.op("Where", far, lowest, scores), axis=-1, name=f"softmax{tag}")
            return index, b.op("GatherElements", probs, index, axis=-1, name=f"weight{tag}")

        first, w1 = pick(logits, "1")
        rest = b.op("ScatterElements", logits, first, b.op("Expand", lowest, b.op("Shape", first)), axis=-1)
        second, w2 = pick(rest, "2")
        zeros = b.op("Mul", logits, b.const(np.asarray(0, NUMPY_DTYPES[dtype]), "zero"))
        dense = b.op("ScatterElements", zeros, first, w1, axis=-1)
        return b.op("ScatterElements", dense, second, w2, axis=-1, name="dense_weights")


def dense_routing(lc: LayerContext, prefix: str, logits: ir.Value, moe: MoeDims) -> ir.Value | None:
    """Routing weights [B,S,E] for the routers the MoE op cannot express; None for the others."""
    routing = moe.routing  # the spec's, or the one the config selects (Cohere2-MoE's expert_selection_fn)
    if routing == "sparsemixer":
        return _sparsemixer(lc.b, logits, moe.jitter, lc.params.dtype)
    if routing in ("sigmoid_biased", "softmax_biased", "sigmoid_topk", "sigmoid_logits_biased", "sqrtsoftplus_biased"):
        return _biased_choice(lc, prefix, logits, moe, routing)
    if routing in GROUPED_ROUTINGS:
        return grouped_routing(lc, prefix, logits, moe)
    if routing == "skip_stream":
        return skip_expert_routing(lc, prefix, logits, moe)
    if routing == "sigmoid_shared_sink":  # Inkling: the shared experts weighted beside the chosen ones
        return shared_sink_routing(lc, prefix, logits, moe)
    return None


def _biased_choice(lc: LayerContext, prefix: str, logits: ir.Value, moe: MoeDims, routing: str) -> ir.Value:
    """Routers that choose on biased scores and weight by the unbiased ones, as dense weights [B,S,E].
    s = sigmoid(logits) (sigmoid_biased: LFM2-MoE; sigmoid_topk: Cohere2-MoE without a bias, MiniMax-M2
    and AFMoE with one, renormalized by the sum alone) or softmax(logits) (softmax_biased: ERNIE-4.5-MoE);
    the top k of s + expert_bias (when the checkpoint has the bias) are chosen (of logits + expert_bias:
    sigmoid_logits_biased, Kolibri-1, renormalized as sigmoid_topk), weighted by s,
    renormalized when norm_topk_prob (ERNIE always) by their sum + 1e-6 (LFM2-MoE) or
    max(sum, moe_norm_min) (ERNIE), times routed_scaling_factor. The group-limited routers
    (DeepSeek, GLM-4-MoE) are graph/grouped_routing.py's."""
    b, dtype = lc.b, lc.params.dtype
    names = lc.spec.moe.names  # type: ignore[union-attr]
    scope = {"softmax_biased": "softmax_router", "sqrtsoftplus_biased": "sqrtsoftplus_router"}.get(routing)
    with b.scope(scope or "sigmoid_router"):
        if routing == "softmax_biased":
            scores = b.op("Softmax", logits, axis=-1, name="scores")
        elif routing == "sqrtsoftplus_biased":  # DeepSeek-V4
            scores = b.op("Sqrt", b.op("Softplus", logits), name="scores")
        else:
            if moe.router_softcap:  # Laguna: c tanh(logits / c) before the sigmoid
                cap = b.const(np.asarray(moe.router_softcap, NUMPY_DTYPES[dtype]), "router_softcap")
                logits = soft_cap(b, logits, cap, "capped_logits")
            scores = b.op("Sigmoid", logits, name="scores")
        choosing = logits if routing == "sigmoid_logits_biased" else scores
        bias_module = lc.held_spelling(names.expert_bias, prefix, suffix="")
        if bias_module is not None:
            bias_name = lc.name(bias_module, suffix="")
            if len(lc.params.store.info(bias_name).shape) > 1:  # ERNIE stores it [1, E]
                flat = lc.params.derived(bias_name, lambda a: a.reshape(-1), shape=(moe.experts,))
                bias = b.initializer(bias_name, flat)
            else:
                bias = b.initializer(bias_name, lc.params.vector([bias_name]))
            choosing = b.op("Add", choosing, bias, name="biased")
        if lc.i in moe.hashed:  # DeepSeek-V4's hash layers: the experts are the table's row of the token id
            chosen = _hashed_choice(lc, prefix)
        else:
            k = b.const([moe.top_k], "k", "int64")
            _, chosen = b.op_multi("TopK", choosing, k, axis=-1, outputs=2, name="topk")
        picked = b.op("GatherElements", scores, chosen, axis=-1, name="picked")
        if moe.normalize:
            total = b.op("ReduceSum", picked, b.const([-1], "last", "int64"), keepdims=1, name="picked_sum")
            if routing == "softmax_biased":
                floor = b.const(np.asarray(moe.norm_min, NUMPY_DTYPES[dtype]), "norm_min")
                picked = b.op("Div", picked, b.op("Max", total, floor), name="renormalized")
            elif routing in ("sigmoid_topk", "sigmoid_logits_biased"):  # Cohere2-MoE: over their sum alone
                picked = b.op("Div", picked, total, name="renormalized")
            elif routing == "sqrtsoftplus_biased":  # DeepSeek-V4: over their sum + 1e-20
                eps = b.const(np.asarray(1e-20, NUMPY_DTYPES[dtype]), "eps")
                picked = b.op("Div", picked, b.op("Add", total, eps), name="renormalized")
            else:
                eps = b.const(np.asarray(1e-6, NUMPY_DTYPES[dtype]), "eps")
                picked = b.op("Div", picked, b.op("Add", total, eps), name="renormalized")
        if moe.routed_scaling != 1.0:
            factor = b.const(np.asarray(moe.routed_scaling, NUMPY_DTYPES[dtype]), "routed_scaling")
            picked = b.op("Mul", picked, factor, name="scaled")
        zeros = b.op("Mul", scores, b.const(np.asarray(0, NUMPY_DTYPES[dtype]), "zero"))
        return b.op("ScatterElements", zeros, chosen, picked, axis=-1, name="dense_weights")


def _hashed_choice(lc: LayerContext, prefix: str) -> ir.Value:
    """[B, S, k] int64: the stored token id -> expert ids table's rows of this run's input ids (a Gather on the
    graph's `input_ids`, which the decoder carries here: MoeNames.hash_table)."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    assert names.hash_table is not None and lc.carried is not None and "input_ids" in lc.carried
    name = lc.name(f"{prefix}{names.hash_table}", suffix="")
    table = np.ascontiguousarray(lc.params.store.read(name), dtype=np.int64)
    return lc.b.op("Gather", lc.b.initializer(name, ir.Tensor(table)), lc.carried["input_ids"], axis=0, name="hashed")
