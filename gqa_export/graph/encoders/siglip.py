"""A SigLIP vision tower and an average-pooling projector: pixels -> image features in the text
model's width (docs/multimodal.md §4).

The tower: a patch convolution (kernel = stride = patch), learned position embeddings, pre-norm
encoder layers (LayerNorm, multi-head self-attention with biases, LayerNorm, fc1 -> GELU -> fc2),
a final LayerNorm. The projector: average pooling of the patch grid to `tokens_per_image`
positions, an RMSNorm whose stored weight w acts as 1 + w, and one projection matrix stored as
[vision width, text width]. The output is `[images, tokens_per_image, text width]`: genai
pre-allocates the buffer before the run, and only a rank-3 output gets one sized for several
images (docs/multimodal.md §2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.encoders.encoder_ops import GELU, layer_norm, linear, patch_embedding
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24 (as the standard-Attention decoders)
N, TOKENS = "num_images", "num_image_tokens"


@dataclass(frozen=True)
class PooledVitDims:
    """What the graph needs from the vision config and the projector's config keys."""

    hidden: int
    heads: int
    layers: int
    image_size: int
    patch: int
    eps: float
    approximate: str  # ONNX Gelu: tanh | none
    tokens_per_image: int
    text_hidden: int
    tower: str  # tensor prefix of the tower: `<tower>embeddings.patch_embedding.weight`
    projector: str  # tensor prefix of the projector

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @property
    def pool(self) -> int:
        """HF's kernel: grid // side, the pooling dropping the grid's last rows and columns where
        the side does not divide it (a 33 x 33 grid pools 2 x 2 to 16 x 16)."""
        return self.grid // math.isqrt(self.tokens_per_image)


def pooled_vit_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> PooledVitDims:
    """The tower's dimensions, or InputError naming what this graph cannot compute."""
    vision = hf_config.vision_config
    act = str(getattr(vision, "hidden_act", "gelu_pytorch_tanh"))
    if act not in GELU:
        raise InputError(f"vision tower activation '{act}' is not supported; export with --text-only")
    tokens = int(hf_config.mm_tokens_per_image)
    grid = int(vision.image_size) // int(vision.patch_size)
    side = math.isqrt(tokens)
    # HF pools with kernel = stride = grid // side, so a grid the side does not divide still pools
    # to side x side where grid // kernel is side (its last rows and columns dropped)
    if side * side != tokens or grid < side or grid // (grid // side) != side:
        raise InputError(
            f"mm_tokens_per_image {tokens} does not pool a {grid}x{grid} patch grid; export with --text-only"
        )
    return PooledVitDims(
        hidden=int(vision.hidden_size),
        heads=int(vision.num_attention_heads),
        layers=int(vision.num_hidden_layers),
        image_size=int(vision.image_size),
        patch=int(vision.patch_size),
        eps=float(vision.layer_norm_eps),
        approximate=GELU[act],
        tokens_per_image=tokens,
        text_hidden=text_hidden,
        tower=tensor_prefix(store, "embeddings.patch_embedding.weight"),
        projector=tensor_prefix(store, "mm_input_projection_weight"),
    )


def build_pooled_vit(dims: PooledVitDims, params: Params) -> ir.Model:
    """pixel_values [N, 3, S, S] (float32, as the processor writes them) -> image_features."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    dtype, d, s = params.dtype, dims.hidden, dims.image_size
    pixels = b.input("pixel_values", ir.DataType.FLOAT, [N, 3, s, s])
    x = pixels if dtype == ir.DataType.FLOAT else b.op("Cast", pixels, to=dtype)
    t, p = dims.tower, dims.patch
    with b.scope("embeddings"):
        x = patch_embedding(b, x, f"{t}embeddings.patch_embedding", p, d, params)
        pos = f"{t}embeddings.position_embedding.weight"
        x = typed(b.op("Add", x, b.initializer(pos, params.tensor(pos))), dtype, [N, dims.grid**2, d])
    for i in range(dims.layers):
        with b.scope(f"encoder.layers.{i}"):
            x = _encoder_layer(b, x, dims, params, f"{t}encoder.layers.{i}.")
    x = layer_norm(b, x, f"{t}post_layernorm", dims.eps, params)
    x = _project(b, x, dims, params)
    b.output(x, "image_features", dtype, [N, dims.tokens_per_image, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _encoder_layer(b: GraphBuilder, x: ir.Value, dims: PooledVitDims, params: Params, name: str) -> ir.Value:
    h = layer_norm(b, x, f"{name}layer_norm1", dims.eps, params)
    x = b.op("Add", x, _attention(b, h, dims, params, f"{name}self_attn."), name="attn_residual")
    h = layer_norm(b, x, f"{name}layer_norm2", dims.eps, params)
    h = b.op("Gelu", _linear(b, h, f"{name}mlp.fc1", params), approximate=dims.approximate)
    return b.op("Add", x, _linear(b, h, f"{name}mlp.fc2", params), name="mlp_residual")


def _attention(b: GraphBuilder, x: ir.Value, dims: PooledVitDims, params: Params, name: str) -> ir.Value:
    """Full (unmasked) multi-head attention over one image's patches, scores scaled by head_dim^-0.5:
    ONNX Attention on [N, patches, width] (its memory-efficient kernels where the EP has them)."""
    q, k, v = (_linear(b, x, name + proj, params) for proj in ("q_proj", "k_proj", "v_proj"))
    heads, scale = dims.heads, (dims.hidden // dims.heads) ** -0.5
    out = b.op("Attention", q, k, v, q_num_heads=heads, kv_num_heads=heads, scale=scale)
    return _linear(b, out, name + "out_proj", params)


def _linear(b: GraphBuilder, x: ir.Value, module: str, params: Params) -> ir.Value:
    """The tower's biased Linear, its Add named after the module (`q_proj`, `fc1`)."""
    return linear(b, x, module, params, add_name=module.rsplit(".", 1)[-1], bias_required=True)


def _project(b: GraphBuilder, x: ir.Value, dims: PooledVitDims, params: Params) -> ir.Value:
    """Average-pool the patch grid, RMSNorm (1 + w), project; images' tokens stacked as rows."""
    d, g, k, m = dims.hidden, dims.grid, dims.pool, dims.projector
    with b.scope("projector"):
        grid = b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1]), b.const([0, d, g, g], "grid", "int64"))
        pooled = b.op("AveragePool", grid, kernel_shape=[k, k], strides=[k, k])
        tokens = b.op("Transpose", b.op("Reshape", pooled, b.const([0, d, -1], "tokens", "int64")), perm=[0, 2, 1])
        norm = f"{m}mm_soft_emb_norm.weight"
        w = b.initializer(norm, params.vector([norm], offset=1.0))
        normed = b.op("SimplifiedLayerNormalization", tokens, w, axis=-1, epsilon=dims.eps, stash_type=1)
        proj = f"{m}mm_input_projection_weight"
        return b.op("MatMul", normed, b.initializer(proj, params.tensor(proj)))
