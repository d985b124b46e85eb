"""Per-layer building blocks: linear layers, RMSNorm, projections with q/k norms, gated MLPs.

Weights become lazy initializers named after the checkpoint tensors they come from (packed ones
after the packed module, e.g. `...self_attn.qkv_proj.weight`), so later stages can address them.
A bias is used exactly when the checkpoint has one (Qwen2's q/k/v biases, Llama's
attention_bias, ...), so no config flag can make the graph disagree with the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.dims import LayerDims, ModelDims
from gqa_export.graph.params import NUMPY_DTYPES, Params

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
    query_scale: ir.Value | None = None  # [B,S,1] per-token query multiplier (Ministral-3)

    def name(self, module: str, suffix: str = "weight") -> str:
        return self.spec.layer_tensor(self.i, module, suffix)

    def has(self, module: str, suffix: str = "weight") -> bool:
        return self.name(module, suffix) in self.params.store

    @property
    def layer(self) -> LayerDims:
        return self.dims.layers[self.i]


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
    """The family's norm over the last axis, fp32 inside (stash_type=1): ORT's
    SimplifiedLayerNormalization (RMSNorm), or LayerNormalization with the checkpoint's bias when
    the spec says `layer` (PhiMoE).

    The recipe's norm_offset turns the stored weight w into (offset + w) (Gemma's RMSNorm).
    """
    w = b.initializer(weight_name, params.vector([weight_name], offset=dims.norm_offset))
    if dims.layer_norm:
        bias_name = weight_name.removesuffix("weight") + "bias"
        bias = b.initializer(bias_name, params.vector([bias_name])) if bias_name in params.store else None
        out = b.op("LayerNormalization", x, w, bias, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    else:
        out = b.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    return typed(out, params.dtype, [B, S, width]) if width else out


def qkv_projection(
    lc: LayerContext, x: ir.Value, separate: bool = False
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """GQA's query/key/value inputs: one packed tensor, or three when q/k/v need their norms or
    the caller (standard Attention) needs them apart. The weights are the same either way.

    A KV-shared layer projects only its query (key and value come from another layer's cache). A
    k = v layer (Gemma-4 full layers with attention_k_eq_v) has no v_proj: its values are the raw
    key projection, before the key norm (and RoPE)."""
    L, dims, layer = lc.spec.layer, lc.dims, lc.layer
    q_width, kv_width = dims.num_heads * layer.head_dim, layer.num_kv_heads * layer.head_dim
    qk_norm = lc.spec.qk_norm is not None
    if layer.shares_kv:
        q = linear(lc, x, [L.q], None, "q_proj")
        return _scale_query(lc, _head_norm(lc, q, L.q_norm, "q_norm", dims.num_heads) if qk_norm else q), None, None
    split = qk_norm or separate or layer.k_eq_v or lc.spec.v_norm or lc.query_scale is not None or dims.clip_qkv
    if L.qkv:  # a checkpoint that stores the fused projection (Phi-3)
        packed = linear(lc, x, [L.qkv], None, "qkv_proj")
    elif layer.k_eq_v:
        packed = linear(lc, x, [L.q, L.k], "self_attn.qk_proj", "qk_proj")
    elif lc.packed_qkv:
        packed = linear(lc, x, [L.q, L.k, L.v], "self_attn.qkv_proj", "qkv_proj")
    else:
        q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
        return _qkv_norms(lc, q, k, v)
    if not split:
        return packed, None, None
    if layer.k_eq_v:
        sizes = lc.b.const([q_width, kv_width], "qk_split", "int64")
        q, k = lc.b.op_multi("Split", packed, sizes, axis=-1, outputs=2, name="qk_split")
        return _qkv_norms(lc, q, k, k)
    sizes = lc.b.const([q_width, kv_width, kv_width], "qkv_split", "int64")
    q, k, v = lc.b.op_multi("Split", packed, sizes, axis=-1, outputs=3, name="qkv_split")
    return _qkv_norms(lc, q, k, v)


def _qkv_norms(lc: LayerContext, q: ir.Value, k: ir.Value, v: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    L, dims, b, layer = lc.spec.layer, lc.dims, lc.b, lc.layer
    if lc.spec.v_norm:  # Gemma-4: RMSNorm over head_dim without a weight
        v = _head_norm(lc, v, None, "v_norm", layer.num_kv_heads)
    if lc.spec.qk_norm == "full":  # OLMo-2: one RMSNorm over all heads' channels
        assert L.q_norm and L.k_norm
        q = rms_norm(b, q, lc.name(L.q_norm), lc.params, dims, "q_norm", dims.num_heads * layer.head_dim)
        k = rms_norm(b, k, lc.name(L.k_norm), lc.params, dims, "k_norm", layer.num_kv_heads * layer.head_dim)
    elif lc.spec.qk_norm == "head":
        assert L.q_norm and L.k_norm
        q = _head_norm(lc, q, L.q_norm, "q_norm", dims.num_heads)
        k = _head_norm(lc, k, L.k_norm, "k_norm", layer.num_kv_heads)
    if dims.clip_qkv:  # OLMoE: q, k and v clamped after the norms, before RoPE
        low, high = (
            b.const(np.asarray(c, NUMPY_DTYPES[lc.params.dtype]), "clip_qkv") for c in (-dims.clip_qkv, dims.clip_qkv)
        )
        q, k, v = (b.op("Clip", t, low, high, name=f"{n}_clip") for t, n in ((q, "q"), (k, "k"), (v, "v")))
    return _scale_query(lc, q), k, v


def _scale_query(lc: LayerContext, q: ir.Value) -> ir.Value:
    return q if lc.query_scale is None else lc.b.op("Mul", q, lc.query_scale, name="query_scale")


def _head_norm(lc: LayerContext, x: ir.Value, module: str | None, name: str, heads: int) -> ir.Value:
    """RMSNorm over each head's head_dim channels of x [B,S,heads*D]; module None: no weight."""
    b, d = lc.b, lc.layer.head_dim
    per_head = b.op("Reshape", x, b.const([0, 0, heads, d], f"{name}_heads", "int64"))
    if module is None:
        weight = b.const(np.ones(d, NUMPY_DTYPES[lc.params.dtype]), f"{name}_unit_weight")
        y = b.op(
            "SimplifiedLayerNormalization", per_head, weight, axis=-1, epsilon=lc.dims.rms_eps, stash_type=1, name=name
        )
    else:
        y = rms_norm(b, per_head, lc.name(module), lc.params, lc.dims, name, 0)
    return b.op("Reshape", y, b.const([0, 0, heads * d], f"{name}_flat", "int64"))


def gated_mlp(lc: LayerContext, x: ir.Value) -> ir.Value:
    """down(act(gate(x)) * up(x)); gate and up run as one MatMul and are split after."""
    L, b = lc.spec.layer, lc.b
    if L.gate_up:
        gate_up = linear(lc, x, [L.gate_up], None, "gate_up_proj")
    else:
        gate_up = linear(lc, x, [L.gate, L.up], "mlp.gate_up_proj", "gate_up_proj")
    width = lc.layer.intermediate_size
    split = b.const([width, width], "split", "int64")
    gate, up = b.op_multi("Split", gate_up, split, axis=-1, outputs=2)
    return linear(lc, b.op("Mul", activation(lc, gate), up), [L.down], None, "down_proj")


def activation(lc: LayerContext, x: ir.Value) -> ir.Value:
    """The config's hidden activation: SiLU, or the tanh-approximated GELU of Gemma (ONNX Gelu-20)."""
    if lc.dims.hidden_act == "silu":
        return lc.b.op("Mul", x, lc.b.op("Sigmoid", x), name="silu")
    return lc.b.op("Gelu", x, approximate="tanh")
