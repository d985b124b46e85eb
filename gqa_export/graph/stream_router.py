"""ZAYA1's router (docs/coverage.md's ZAYA section): an MLP over a narrow router stream carried from
layer to layer, choosing among the experts and one "skip" class.

- The stream: r_i = down_proj(x) (+ bias), plus r_{i-1} * router_states_scale on every layer but the
  first (the previous layer's stream at the same token: no state across steps, one value handed
  from layer to layer in the graph).
- The logits: out_proj(gelu(fc2(gelu(fc1(rmsnorm(r_i)))))) over num_experts + 1 classes (exact GELU).
- The choice: softmax, the top k of probs + balancing_biases (a float32 buffer), weighted by the
  unbiased probs, never renormalized. transformers 5.25 sets the skip class's bias to -1 whenever it
  loads a checkpoint (ZayaPreTrainedModel._init_weights assigns it outside the loaded-tensor guard),
  whatever the checkpoint stores: the graph reads it so too. The last class is the skip expert, which computes nothing:
  its weight is dropped with its column, so a token that chose it gets an all-zero row, which
  graph/moe.py turns into a zero output (graph/zero_experts.all_zero_guard), exactly HF's masked weight.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.moe import MoeDims

STREAM = "router_stream"


def stream_router_logits(lc: LayerContext, x: ir.Value, prefix: str) -> ir.Value:
    """The router logits [B,S,E+1]; this layer's stream is left in lc.carried for the next layer."""
    b, params = lc.b, lc.params
    gate = f"{prefix}gate"
    assert lc.carried is not None
    with b.scope("router"):
        stream = linear(lc, x, [f"{gate}.down_proj"], None, "down_proj")
        scale_name = lc.name(f"{gate}.router_states_scale", suffix="")
        if STREAM in lc.carried and scale_name in params.store:
            scale = b.initializer(scale_name, params.vector([scale_name]))
            carried = b.op("Mul", lc.carried[STREAM], scale, name="carried_stream")
            stream = b.op("Add", stream, carried, name="stream")
        lc.carried[STREAM] = stream
        width = int(params.store.info(lc.name(f"{gate}.down_proj")).shape[0])
        h = normalize(b, stream, lc.name(f"{gate}.router_mlp.norm"), params, lc.dims, "norm", width)
        for fc in ("fc1", "fc2"):
            h = b.op("Gelu", linear(lc, h, [f"{gate}.router_mlp.{fc}"], None, fc), name=f"{fc}_gelu")
        return linear(lc, h, [f"{gate}.router_mlp.out_proj"], None, "out_proj")


def skip_expert_routing(lc: LayerContext, prefix: str, logits: ir.Value, moe: MoeDims) -> ir.Value:
    """Dense weights [B,S,E] over the real experts: softmax over E + 1 classes, the top k chosen on
    probs + balancing_biases, weighted by the unbiased probs; the skip class's column dropped."""
    b, params = lc.b, lc.params
    bias_name = lc.name(f"{prefix}gate.balancing_biases", suffix="")
    with b.scope("skip_router"):
        probs = b.op("Softmax", logits, axis=-1, name="probs")
        # transformers' _init_weights sets the skip class's entry to -1 on every load, over the stored value
        bias = b.initializer(bias_name, params.derived(bias_name, _skip_at_minus_one))
        choosing = b.op("Add", probs, bias, name="balanced")
        k = b.const([moe.top_k], "k", "int64")
        _, chosen = b.op_multi("TopK", choosing, k, axis=-1, outputs=2, name="topk")
        picked = b.op("GatherElements", probs, chosen, axis=-1, name="picked")
        zeros = b.op("Mul", probs, b.const(np.asarray(0, NUMPY_DTYPES[params.dtype]), "zero"))
        dense = b.op("ScatterElements", zeros, chosen, picked, axis=-1, name="dense_with_skip")
        start, stop = b.const([0], "real_start", "int64"), b.const([moe.experts], "real_stop", "int64")
        return b.op("Slice", dense, start, stop, b.const([-1], "last", "int64"), name="skip_dropped")


def _skip_at_minus_one(biases: np.ndarray) -> np.ndarray:
    """The balancing biases as transformers holds them after loading: the last (skip) entry -1."""
    return np.concatenate([biases[:-1], np.full(1, -1.0, biases.dtype)])
