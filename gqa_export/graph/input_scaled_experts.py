"""Experts whose router score scales their *input* (MoeSpec routing "sigmoid_scaled_input", Llama-4).

HF (models/llama4/modeling_llama4.py, Llama4TextMoe): the top k of the router logits are chosen,
s = sigmoid(logit) for each, and the chosen expert e computes down(silu(gate(s x)) * up(s x)); the
expert outputs are summed without further weights (unchosen experts see a zero input and, having
no biases, give zero). Through the SiLU gate that is not s times the expert's output, so the MoE
op's weighted sum cannot express it for k > 1 (docs/llama4.md):
- top 1 (Llama-4 Scout and Maverick): the token's input is scaled by its one score before the
  MoE op, which routes it to the same expert (the argmax of the logits) with weight 1 (its
  renormalized top-1 weight); exact, and quantizes to QMoE.
- top k > 1: plain ops, every expert on every token with its own scaled input (E times the op's
  compute; float in int4/int8 packages).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.experts import ExpertWeights, stacked
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.moe import MoeDims


def top1_scaled_input(lc: LayerContext, x: ir.Value, logits: ir.Value) -> ir.Value:
    """x [B,S,H] times sigmoid(the top router logit) [B,S,1]: the one chosen expert's input."""
    b = lc.b
    with b.scope("router_scale"):
        top = b.op("ReduceMax", logits, b.const([-1], "last", "int64"), keepdims=1, name="top_logit")
        return b.op("Mul", x, b.op("Sigmoid", top, name="score"), name="scaled_input")


def input_scaled_experts(
    lc: LayerContext, x: ir.Value, logits: ir.Value, experts: ExpertWeights, moe: MoeDims
) -> ir.Value:
    """y = sum_e down_e(act(gate_e(w_e x)) * up_e(w_e x)) with w_e = sigmoid(logit_e) on the top k
    experts and 0 elsewhere (an expert of zero input gives zero, as in HF's every-expert form)."""
    b, params = lc.b, lc.params
    E, I, H = moe.experts, moe.intermediate, lc.dims.hidden_size  # noqa: E741
    base = lc.spec.layer_tensor(lc.i, "moe", "")
    dtype = NUMPY_DTYPES[params.dtype]
    with b.scope("experts"):
        values, chosen = b.op_multi("TopK", logits, b.const([moe.top_k], "k", "int64"), axis=-1, outputs=2)
        zeros = b.op("Mul", logits, b.const(np.asarray(0, dtype), "zero"))
        scores = b.op("ScatterElements", zeros, chosen, b.op("Sigmoid", values), axis=-1, name="input_scales")
        fc1 = b.initializer(f"{base}.fc1", stacked(experts, experts.fc1_rows, 2 * I, H, params.cast, params.dtype))
        fc2 = b.initializer(f"{base}.fc2", stacked(experts, experts.fc2_rows, H, I, params.cast, params.dtype))
        column = b.op("Unsqueeze", x, b.const([2, 4], "axes24", "int64"))  # [B,S,1,H,1]
        per_expert = b.op("Unsqueeze", scores, b.const([3, 4], "axes34", "int64"))  # [B,S,E,1,1]
        h = b.op("MatMul", fc1, b.op("Mul", column, per_expert, name="scaled_inputs"), name="fc1")  # [B,S,E,2I,1]
        h = b.op("Reshape", h, b.const([0, 0, E, I, 2], "pairs", "int64"))  # interleaved gate/up rows
        gate, up = b.op_multi("Split", h, b.const([1, 1], "halves", "int64"), axis=-1, outputs=2)
        y = b.op("MatMul", fc2, b.op("Mul", activation(lc, gate), up), name="fc2")  # [B,S,E,H,1]
        y = b.op("Squeeze", y, b.const([-1], "last", "int64"))  # [B,S,E,H]
        return b.op("ReduceSum", y, b.const([2], "experts_axis", "int64"), keepdims=0, name="combine")
