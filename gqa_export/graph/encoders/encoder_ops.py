"""The op sequences the vision and audio towers share (graph/encoders/*): one copy of each, so a fix
reaches every tower that writes it.

Each helper reads checkpoint tensors by the names its caller passes, and where a tower names its
nodes, the caller passes those names too: a tower built with these helpers is byte for byte the
graph its own copies wrote. Helpers that differ from these in an op, an attribute or a name stay in
their tower (nemo_conformer's LayerNorm without stash_type, qwen_vision's prefixed norms, the
towers' rotary tables, siglip's named-Add layer without a padding mask, ...).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES, Params

# HF activation names -> ONNX Gelu's `approximate` (the SigLIP towers' fc1 -> GELU -> fc2)
GELU = {"gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu": "none"}


def vector(b: GraphBuilder, name: str, params: Params) -> ir.Value:
    """The 1-D checkpoint tensor `name` (a norm's weight, a bias) as an initializer of that name."""
    return b.initializer(name, params.vector([name]))


def matmul(b: GraphBuilder, x: ir.Value, weight: str, params: Params, name: str | None = None) -> ir.Value:
    """x @ W for the Linear weight stored [out, in] as `weight` (written [in, out]); `name` names
    the node (None: the op type)."""
    return b.op("MatMul", x, b.initializer(weight, params.matmul_weight([weight])), name=name)


def linear(
    b: GraphBuilder,
    x: ir.Value,
    module: str,
    params: Params,
    *,
    matmul_name: str | None = None,
    add_name: str | None = None,
    bias_required: bool = False,
) -> ir.Value:
    """nn.Linear `<module>.weight` plus `<module>.bias` where the checkpoint stores one (a tower
    without biases reads the same code); the node names are the caller's (None: the op types).
    `bias_required`: the tower's modules always have one (SigLIP's, NeMo's), so a checkpoint without
    it is refused where it is read, never built as if the bias were zero."""
    y = matmul(b, x, f"{module}.weight", params, matmul_name)
    if bias_required or f"{module}.bias" in params.store:
        y = b.op("Add", y, vector(b, f"{module}.bias", params), name=add_name)
    return y


def layer_norm(b: GraphBuilder, x: ir.Value, module: str, eps: float, params: Params) -> ir.Value:
    """nn.LayerNorm with weight and bias over the last axis in float32 (stash_type 1), the node
    named after the module's last name part (`layer_norm1`, `post_layernorm`)."""
    w, bias = vector(b, f"{module}.weight", params), vector(b, f"{module}.bias", params)
    name = module.rsplit(".", 1)[-1]
    return b.op("LayerNormalization", x, w, bias, axis=-1, epsilon=eps, stash_type=1, name=name)


def rms_norm(b: GraphBuilder, x: ir.Value, weight: ir.Value, eps: float) -> ir.Value:
    """RMSNorm over the last axis in float32 (stash_type 1): weight · x / sqrt(mean(x²) + eps), the
    weight as given (a checkpoint vector, or the caller's ones)."""
    return b.op("SimplifiedLayerNormalization", x, weight, axis=-1, epsilon=eps, stash_type=1)


def silu(b: GraphBuilder, x: ir.Value) -> ir.Value:
    """x · sigmoid(x) (HF's silu / swish) as Sigmoid and Mul."""
    return b.op("Mul", x, b.op("Sigmoid", x))


def activation(b: GraphBuilder, x: ir.Value, act: str, dtype: ir.DataType) -> ir.Value:
    """The HF activation `act` of a tower that checked it is one of silu | quick_gelu | gelu |
    gelu_pytorch_tanh (quick_gelu's 1.702 in the graph's dtype, as HF multiplies)."""
    if act == "silu":
        return silu(b, x)
    if act == "quick_gelu":
        return b.op("Mul", x, b.op("Sigmoid", b.op("Mul", x, b.const(np.array(1.702, NUMPY_DTYPES[dtype]), "qg"))))
    return b.op("Gelu", x, approximate="tanh" if act == "gelu_pytorch_tanh" else "none")


def patch_embedding(b: GraphBuilder, x: ir.Value, module: str, patch: int, hidden: int, params: Params) -> ir.Value:
    """[N, 3, S, S] -> [N, (S/patch)², hidden]: the biased Conv2d (kernel = stride = patch), its
    grid flattened row-major."""
    w = b.initializer(f"{module}.weight", params.tensor(f"{module}.weight"))
    x = b.op("Conv", x, w, vector(b, f"{module}.bias", params), kernel_shape=[patch] * 2, strides=[patch] * 2)
    return b.op("Transpose", b.op("Reshape", x, b.const([0, hidden, -1], "grid_flat", "int64")), perm=[0, 2, 1])


def key_bias(b: GraphBuilder, mask: ir.Value, dtype: ir.DataType) -> ir.Value:
    """[N, 1, P, P] additive bias from an [N, P] patch mask: 0 on an image's own patches, the lowest
    float on its padding (HF's bidirectional padding mask; every image has a patch, so no row is all
    masked)."""
    np_dtype = NUMPY_DTYPES[dtype]
    with b.scope("padding_mask"):
        keep = b.op("Cast", b.op("Unsqueeze", mask, b.const([1, 2], "ax12", "int64")), to=ir.DataType.BOOL)
        low = np.finfo(np.float32).min if dtype == ir.DataType.FLOAT else -65504.0
        bias = b.op("Where", keep, b.const(np.zeros((), np_dtype), "zero"), b.const(np.array(low, np_dtype), "low"))
        # onnxruntime's Attention takes a mask with the queries' length (no broadcast over them)
        n, p = b.op("Shape", mask, start=0, end=1), b.op("Shape", mask, start=1, end=2)
        return b.op("Expand", bias, b.op("Concat", n, b.const([1], "heads", "int64"), p, p, axis=0))


class VitLayerDims(Protocol):
    """What a SigLIP encoder layer reads from its tower's dims."""

    @property
    def hidden(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def eps(self) -> float: ...
    @property
    def approximate(self) -> str: ...  # ONNX Gelu: tanh | none


def masked_vit_layer(
    b: GraphBuilder, x: ir.Value, bias: ir.Value, dims: VitLayerDims, params: Params, name: str
) -> ir.Value:
    """A pre-norm SigLIP encoder layer whose attention takes `bias` (key_bias: padding masked):
    LayerNorm, ONNX Attention with biased q/k/v/out projections, LayerNorm, fc1 -> GELU -> fc2."""
    h = layer_norm(b, x, f"{name}layer_norm1", dims.eps, params)
    a = f"{name}self_attn."
    q, k, v = (linear(b, h, a + proj, params) for proj in ("q_proj", "k_proj", "v_proj"))
    heads = dims.heads
    out = b.op("Attention", q, k, v, bias, q_num_heads=heads, kv_num_heads=heads, scale=(dims.hidden // heads) ** -0.5)
    x = b.op("Add", x, linear(b, out, a + "out_proj", params), name="attn_residual")
    h = layer_norm(b, x, f"{name}layer_norm2", dims.eps, params)
    h = b.op("Gelu", linear(b, h, f"{name}mlp.fc1", params), approximate=dims.approximate)
    return b.op("Add", x, linear(b, h, f"{name}mlp.fc2", params), name="mlp_residual")


def cos_sin(b: GraphBuilder, angles: ir.Value, dtype: ir.DataType) -> tuple[ir.Value, ir.Value]:
    """cos and sin of float32 rotary angles, cast to the activation dtype."""
    cos, sin = b.op("Cos", angles), b.op("Sin", angles)
    if dtype != ir.DataType.FLOAT:
        cos, sin = (b.op("Cast", v, to=dtype) for v in (cos, sin))
    return cos, sin


def rotate_half(b: GraphBuilder, x: ir.Value, cos: ir.Value, sin: ir.Value, head_dim: int, name: str) -> ir.Value:
    """x·cos + rotate_half(x)·sin over the whole head dim (x [P, heads, head_dim]); `name` ("q",
    "k") names the Split and the sum."""
    half = head_dim // 2
    x1, x2 = b.op_multi("Split", x, b.const([half, half], "halves", "int64"), axis=-1, outputs=2, name=f"{name}_split")
    turned = b.op("Concat", b.op("Neg", x2), x1, axis=-1)
    return b.op("Add", b.op("Mul", x, cos), b.op("Mul", turned, sin), name=f"{name}_rope")


def patch_attention(
    b: GraphBuilder,
    qkv: tuple[ir.Value, ir.Value, ir.Value],
    rotary: tuple[ir.Value, ir.Value],
    bias: ir.Value,
    head_dim: int,
    dtype: ir.DataType,
) -> ir.Value:
    """Bidirectional multi-head attention of every patch over the patches `bias` lets it see (an
    additive [P, P] block mask): q and k rotated (rotate_half), softmax(q·kᵀ·head_dim^-½ + bias)·v
    as MatMuls ([P, heads, head_dim] each in, [P, heads·head_dim] out)."""
    q, k, v = qkv
    q, k = rotate_half(b, q, *rotary, head_dim, "q"), rotate_half(b, k, *rotary, head_dim, "k")
    q, v = (b.op("Transpose", s, perm=[1, 0, 2]) for s in (q, v))  # [heads, P, hd]
    k = b.op("Transpose", k, perm=[1, 2, 0])  # [heads, hd, P]
    scale = b.const(np.array(head_dim**-0.5, NUMPY_DTYPES[dtype]), "scale")
    scores = b.op("Add", b.op("Mul", b.op("MatMul", q, k), scale), bias)
    out = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
    return b.op("Reshape", b.op("Transpose", out, perm=[1, 0, 2]), b.const([0, -1], "flat", "int64"))
