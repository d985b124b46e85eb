"""Grouped expert selection (DeepSeek-V2/V3 routers) as dense routing weights [B,S,E], zero off the
chosen experts, which the MoE op takes as log-weights (graph/moe.py, docs/moe.md §4).

The experts form n_group equal groups; only the topk_group best groups compete for the top k.
- "softmax_group_limited" (DeepseekV2TopkRouter): p = softmax(logits); a group's score is its
  highest p (groups = 1 under topk_method greedy: no masking); p outside the kept groups becomes 0;
  the top k of p, times routed_scaling_factor, never renormalized (V2 ignores norm_topk_prob).
- "sigmoid_group_biased" (DeepseekV3TopkRouter): s = sigmoid(logits), c = s + e_score_correction_bias;
  a group's score is the sum of its two highest c; c outside the kept groups becomes -inf; the top k
  of c are chosen and weighted by s, divided by (their sum + 1e-20) when norm_topk_prob, times
  routed_scaling_factor.
- "softmax_grouped" (Mistral4TopkRouter): V3's choice on p = softmax(logits) without a bias: a group's
  score is the sum of its two highest p; p outside the kept groups becomes 0 (masked_fill 0.0); the top
  k of p, divided by (their sum + 1e-20) when norm_topk_prob, times routed_scaling_factor.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.moe import MoeDims

GROUPED_ROUTINGS = ("softmax_group_limited", "sigmoid_group_biased", "softmax_grouped")


def grouped_routing(lc: LayerContext, prefix: str, logits: ir.Value, moe: MoeDims) -> ir.Value:
    """The dense routing weights of the spec's grouped router."""
    b, dtype = lc.b, lc.params.dtype
    routing = moe.routing  # the resolved routing (model/moe.py read_moe), as _dense_routing dispatches on it
    sigmoid = routing == "sigmoid_group_biased"
    limited = routing == "softmax_group_limited"  # DeepSeek-V2: groups by their best score, never renormalized

    def scalar(value: float, name: str) -> ir.Value:
        return b.const(np.asarray(value, NUMPY_DTYPES[dtype]), name)

    last = b.const([-1], "last", "int64")
    with b.scope("grouped_router"):
        scores = b.op("Sigmoid", logits, name="scores") if sigmoid else b.op("Softmax", logits, axis=-1, name="scores")
        choosing = scores
        names = lc.spec.moe.names  # type: ignore[union-attr]
        # "a|b": the spellings tried in order (EXAONE-MoE's hub mlp.e_score_correction_bias, 5.x's under gate.)
        bias_module = lc.held_spelling(names.expert_bias, prefix, suffix="")
        if bias_module is not None:
            bias_name = lc.name(bias_module, suffix="")
            choosing = b.op("Add", scores, b.initializer(bias_name, lc.params.vector([bias_name])), name="biased")
        if moe.groups > 1:
            choosing = _keep_groups(lc, choosing, moe, sigmoid, top2=not limited)
        values, chosen = b.op_multi("TopK", choosing, b.const([moe.top_k], "k", "int64"), axis=-1, outputs=2,
                                    name="topk")  # fmt: skip
        picked = b.op("GatherElements", scores, chosen, axis=-1, name="picked") if sigmoid else values
        if not limited and moe.normalize:
            total = b.op("ReduceSum", picked, last, keepdims=1, name="picked_sum")
            picked = b.op("Div", picked, b.op("Add", total, scalar(1e-20, "eps")), name="renormalized")
        if moe.routed_scaling != 1.0:
            picked = b.op("Mul", picked, scalar(moe.routed_scaling, "routed_scaling"), name="scaled")
        zeros = b.op("Mul", scores, scalar(0.0, "zero"))
        return b.op("ScatterElements", zeros, chosen, picked, axis=-1, name="dense_weights")


def _keep_groups(lc: LayerContext, choosing: ir.Value, moe: MoeDims, sigmoid: bool, top2: bool) -> ir.Value:
    """`choosing` [B,S,E] with the experts outside the topk_group best groups masked: to 0 (softmax
    scores, V2's and Mistral-4's masked_fill 0.0) or -inf (biased sigmoid scores, V3's masked_fill -inf);
    groups ranked by their best score (V2) or by the sum of their two best (`top2`: V3, Mistral-4)."""
    b, dtype = lc.b, lc.params.dtype
    per_group = moe.experts // moe.groups
    grouped = b.op("Reshape", choosing, b.const([0, 0, moe.groups, per_group], "expert_groups", "int64"))
    last = b.const([-1], "last", "int64")
    if top2:  # the sum of each group's two best scores
        best2, _ = b.op_multi("TopK", grouped, b.const([2], "two", "int64"), axis=-1, outputs=2, name="group_top2")
        group_scores = b.op("ReduceSum", best2, last, keepdims=0, name="group_scores")
    else:
        group_scores = b.op("ReduceMax", grouped, last, keepdims=0, name="group_scores")
    _, kept = b.op_multi("TopK", group_scores, b.const([moe.groups_kept], "groups_kept", "int64"), axis=-1,
                         outputs=2, name="group_topk")  # fmt: skip
    zeros = b.op("Mul", group_scores, b.const(np.asarray(0, NUMPY_DTYPES[dtype]), "zero_g"))
    ones = b.op("Add", b.op("GatherElements", zeros, kept, axis=-1), b.const(np.asarray(1, NUMPY_DTYPES[dtype]), "one"))
    mask = b.op("ScatterElements", zeros, kept, ones, axis=-1, name="group_mask")  # [B,S,G]: 1 kept, 0 not
    mask = b.op("Unsqueeze", mask, last)  # [B,S,G,1]
    if sigmoid:
        lowest = b.const(np.asarray(-np.inf, NUMPY_DTYPES[dtype]), "minus_inf")
        keep = b.op("Cast", mask, to=ir.DataType.BOOL)
        masked = b.op("Where", keep, grouped, lowest, name="masked")
    else:
        masked = b.op("Mul", grouped, mask, name="masked")
    return b.op("Reshape", masked, b.const([0, 0, moe.experts], "experts_flat", "int64"), name="kept_groups")
