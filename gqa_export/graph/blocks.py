"""Per-layer building blocks: linear layers, RMSNorm, projections with q/k norms, gated MLPs.

Weights become lazy initializers named after the checkpoint tensors they come from (packed ones
after the packed module, e.g. `...self_attn.qkv_proj.weight`), so later stages can address them.
A bias is used exactly when the checkpoint has one (Qwen2's q/k/v biases, Llama's
attention_bias, ...), so no config flag can make the graph disagree with the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.dims import ModelDims
from gqa_export.graph.params import Params

B, S = "batch_size", "sequence_length"


@dataclass(frozen=True)
class LayerContext:
    """What every block of layer `i` needs."""

    b: GraphBuilder
    i: int
    dims: ModelDims
    spec: ArchSpec
    params: Params
    packed_qkv: bool

    def name(self, module: str, suffix: str = "weight") -> str:
        return self.spec.layer_tensor(self.i, module, suffix)

    def has(self, module: str, suffix: str = "weight") -> bool:
        return self.name(module, suffix) in self.params.store


def linear(lc: LayerContext, x: ir.Value, modules: list[str], packed_name: str | None, node: str) -> ir.Value:
    """x @ concat(W_m.T) (+ concat(b_m) when the checkpoint has the biases)."""
    b, params = lc.b, lc.params
    graph_name = lc.name(packed_name) if packed_name else lc.name(modules[0])
    weight = b.initializer(graph_name, params.matmul_weight([lc.name(m) for m in modules]))
    y = b.op("MatMul", x, weight, name=f"{node}/MatMul")
    if all(lc.has(m, "bias") for m in modules):
        bias_name = lc.name(packed_name, "bias") if packed_name else lc.name(modules[0], "bias")
        bias = b.initializer(bias_name, params.vector([lc.name(m, "bias") for m in modules]))
        y = b.op("Add", y, bias, name=f"{node}/Add")
    return y


def rms_norm(
    b: GraphBuilder, x: ir.Value, weight_name: str, params: Params, dims: ModelDims, name: str, width: int
) -> ir.Value:
    """ORT's SimplifiedLayerNormalization over the last axis (fp32 inside: stash_type=1).

    The recipe's norm_offset turns the stored weight w into (offset + w) (Gemma's RMSNorm).
    """
    w = b.initializer(weight_name, params.vector([weight_name], offset=dims.norm_offset))
    out = b.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    return typed(out, params.dtype, [B, S, width]) if width else out


def qkv_projection(
    lc: LayerContext, x: ir.Value, separate: bool = False
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """GQA's query/key/value inputs: one packed tensor, or three when q/k need their RMSNorms or
    the caller (standard Attention) needs them apart. The weights are the same either way."""
    L, dims = lc.spec.layer, lc.dims
    q_width, kv_width = dims.num_heads * dims.head_dim, dims.num_kv_heads * dims.head_dim
    qk_norm = lc.spec.qk_norm is not None
    split = qk_norm or separate
    if L.qkv:  # a checkpoint that stores the fused projection (Phi-3)
        packed = linear(lc, x, [L.qkv], None, "qkv_proj")
    elif lc.packed_qkv:
        packed = linear(lc, x, [L.q, L.k, L.v], "self_attn.qkv_proj", "qkv_proj")
    else:
        q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
        return (*_qk_norms(lc, q, k), v) if qk_norm else (q, k, v)
    if not split:
        return packed, None, None
    sizes = lc.b.const([q_width, kv_width, kv_width], "qkv_split", "int64")
    q, k, v = lc.b.op_multi("Split", packed, sizes, axis=-1, outputs=3, name="qkv_split")
    return (*_qk_norms(lc, q, k), v) if qk_norm else (q, k, v)


def _qk_norms(lc: LayerContext, q: ir.Value, k: ir.Value) -> tuple[ir.Value, ir.Value]:
    L, dims, b = lc.spec.layer, lc.dims, lc.b
    assert L.q_norm and L.k_norm
    if lc.spec.qk_norm == "full":  # OLMo-2: one RMSNorm over all heads' channels
        return (
            rms_norm(b, q, lc.name(L.q_norm), lc.params, dims, "q_norm", dims.num_heads * dims.head_dim),
            rms_norm(b, k, lc.name(L.k_norm), lc.params, dims, "k_norm", dims.num_kv_heads * dims.head_dim),
        )
    per_head = b.const([0, 0, -1, dims.head_dim], "per_head", "int64")
    flat = b.const([0, 0, -1], "flat_heads", "int64")

    def norm(x: ir.Value, module: str, name: str) -> ir.Value:
        y = rms_norm(b, b.op("Reshape", x, per_head), lc.name(module), lc.params, dims, name, 0)
        return b.op("Reshape", y, flat)

    return norm(q, L.q_norm, "q_norm"), norm(k, L.k_norm, "k_norm")


def gated_mlp(lc: LayerContext, x: ir.Value) -> ir.Value:
    """down(act(gate(x)) * up(x)); gate and up run as one MatMul and are split after."""
    L, dims, b = lc.spec.layer, lc.dims, lc.b
    if L.gate_up:
        gate_up = linear(lc, x, [L.gate_up], None, "gate_up_proj")
    else:
        gate_up = linear(lc, x, [L.gate, L.up], "mlp.gate_up_proj", "gate_up_proj")
    split = b.const([dims.intermediate_size, dims.intermediate_size], "split", "int64")
    gate, up = b.op_multi("Split", gate_up, split, axis=-1, outputs=2)
    if dims.hidden_act == "silu":
        act = b.op("Mul", gate, b.op("Sigmoid", gate), name="silu")
    else:  # the tanh-approximated GELU of Gemma (ONNX Gelu-20)
        act = b.op("Gelu", gate, approximate="tanh")
    return linear(lc, b.op("Mul", act, up), [L.down], None, "down_proj")
