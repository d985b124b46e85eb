"""A mixture of attention heads' gating (JetMoE's MoA, arch/expert_attention.py): the attention
output of every expert's heads [B, S, kv_heads * E * D] (kv-head-major, as source/expert_views.py
orders the queries) times each expert's dense routing weight, before the one output projection.

The router is JetMoE's: the top k of the logits, softmaxed over themselves (in float32, as HF casts
them), zero for the other experts; the output projection then sums the k chosen experts' outputs
weighted by their gates, which is HF's per-token reduce. The op computes every expert's queries: E/k
times the query work of the sparse form, the same KV cache."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear


def gated_expert_heads(lc: LayerContext, x: ir.Value, attended: ir.Value) -> ir.Value:
    """`attended` [B, S, kv_heads * E * D] with expert e's heads times its gate, from the router on x."""
    names = lc.spec.attention_experts
    moe = lc.dims.moe
    assert names is not None and moe is not None
    b, dtype = lc.b, lc.params.dtype
    kv_heads, experts, head_dim = lc.layer.num_kv_heads, moe.experts, lc.layer.head_dim
    with b.scope("expert_router"):
        logits = linear(lc, x, [names.router], None, "logits")
        if dtype != ir.DataType.FLOAT:
            logits = b.op("Cast", logits, to=ir.DataType.FLOAT, name="logits_f32")
        top, chosen = b.op_multi("TopK", logits, b.const([moe.top_k], "k", "int64"), axis=-1, outputs=2, name="topk")
        gates = b.op("Softmax", top, axis=-1, name="gates")
        zeros = b.op("Sub", logits, logits, name="zeros")  # float32 without a float32 constant in fp16 graphs
        dense = b.op("ScatterElements", zeros, chosen, gates, axis=-1, name="dense_gates")
        if dtype != ir.DataType.FLOAT:
            dense = b.op("Cast", dense, to=dtype, name="gates_cast")
        per_head = b.op("Unsqueeze", dense, b.const([2, 4], "head_axes", "int64"), name="gates_per_head")  # [B,S,1,E,1]
        heads = b.const([0, 0, kv_heads, experts, head_dim], "expert_heads", "int64")
        scaled = b.op("Mul", b.op("Reshape", attended, heads), per_head, name="gated_heads")
        flat = b.const(np.asarray([0, 0, -1], np.int64), "heads_flat")
        return b.op("Reshape", scaled, flat, name="gated_flat")
