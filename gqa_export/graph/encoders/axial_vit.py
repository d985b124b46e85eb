"""A patch-sequence ViT with axial 2-D rotary attention, pooled by patch position, and a norm +
projection into the text model's width: unpadded patches -> soft tokens (docs/multimodal.md §13).

Inputs are what onnxruntime-genai's Gemma4ImageTransform writes: `pixel_values [N, P, 3·p·p]`
(rescaled to [0, 1], one row per patch, no padding) and `pixel_position_ids [N, P, 2]` int64, the
(x, y) column and row of each patch. The graph:

- patch embedding: `2·(pixels - 0.5)` → Linear (no bias) + a learned table per axis, gathered at x
  and at y and added;
- encoder layers: RMSNorm (weight as is) around attention and around a GeGLU MLP, each branch with
  a post-norm before its residual; queries and keys RMS-normed per head (with weights), values
  per head without weight; the head split in two halves, the first rotated by x and the second
  by y with the same frequencies (rotate-half inside each half); scores unscaled, no mask;
- pooling: the patches of each `k x k` block of the grid (k = pooling_kernel_size) averaged into
  one soft token, blocks numbered row-major over `ceil(width / k)` columns, then times
  √vision width (float32), and the optional standardization `(x - bias) · scale`;
- projection: RMSNorm without weight, then one bias-free matrix to the text width.

Clipped linears (use_clipped_linears) clamp each projection's input and output with the stored
bounds. The output is `[N · P / k², text width]`: genai's gemma4 path requires rank 2 (probed,
docs/multimodal.md §13).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.encoders.clipped_linear import clipped_linear
from gqa_export.graph.encoders.encoder_ops import GELU, cos_sin, matmul, rms_norm, vector
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, P, TOKENS = "num_images", "num_patches", "num_image_tokens"
F32 = ir.DataType.FLOAT


@dataclass(frozen=True)
class AxialVitDims:
    """What the graph needs from the vision config."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    patch: int
    pool: int  # pooling_kernel_size
    eps: float
    approximate: str  # ONNX Gelu: tanh | none
    theta: float
    standardize: bool
    clipped: bool
    text_hidden: int
    projector_eps: float
    positions: int  # position_embedding_size: the columns (and rows) of patches the position table holds
    tower: str  # prefix of `patch_embedder.input_proj.weight`
    projector: str  # prefix of `embed_vision.embedding_projection.weight`

    @property
    def patch_width(self) -> int:
        return 3 * self.patch * self.patch


def axial_vit_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> AxialVitDims:
    """The tower's dimensions, or InputError naming what this graph cannot compute."""
    vision = hf_config.vision_config
    act = str(getattr(vision, "hidden_activation", "gelu_pytorch_tanh"))
    if act not in GELU:
        raise InputError(f"vision tower activation '{act}' is not supported; export with --text-only")
    rope = dict(getattr(vision, "rope_parameters", None) or {})
    if rope.get("rope_type", "axial") != "axial":
        raise InputError(f"vision rope type {rope.get('rope_type')} is not supported; export with --text-only")
    head_dim = int(getattr(vision, "head_dim", None) or vision.hidden_size // vision.num_attention_heads)
    if head_dim % 4:
        raise InputError(f"vision head_dim {head_dim} does not split into two rotated halves; export with --text-only")
    return AxialVitDims(
        hidden=int(vision.hidden_size),
        heads=int(vision.num_attention_heads),
        kv_heads=int(getattr(vision, "num_key_value_heads", None) or vision.num_attention_heads),
        head_dim=head_dim,
        layers=int(vision.num_hidden_layers),
        patch=int(vision.patch_size),
        pool=int(vision.pooling_kernel_size),
        eps=float(vision.rms_norm_eps),
        approximate=GELU[act],
        theta=float(rope.get("rope_theta", 100.0)),
        standardize=bool(getattr(vision, "standardize", False)),
        clipped=bool(getattr(vision, "use_clipped_linears", False)),
        text_hidden=text_hidden,
        projector_eps=float(vision.rms_norm_eps),
        positions=int(vision.position_embedding_size),
        tower=tensor_prefix(store, "patch_embedder.input_proj.weight"),
        projector=tensor_prefix(store, "embed_vision.embedding_projection.weight"),  # not embed_audio's
    )


def build_axial_vit(dims: AxialVitDims, params: Params) -> ir.Model:
    """pixel_values [N, P, 3·p·p] float32 + pixel_position_ids [N, P, 2] -> image_features."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    dtype, d, t = params.dtype, dims.hidden, dims.tower
    pixels = b.input("pixel_values", F32, [N, P, dims.patch_width])
    positions = b.input("pixel_position_ids", ir.DataType.INT64, [N, P, 2])
    px, py = (b.op("Squeeze", part, b.const([-1], "last", "int64")) for part in _split(b, positions, [1, 1]))
    with b.scope("patch_embedder"):
        x = b.op("Mul", b.op("Sub", pixels, b.const(np.float32(0.5), "half")), b.const(np.float32(2.0), "two"))
        x = x if dtype == F32 else b.op("Cast", x, to=dtype)
        x = _linear(b, x, f"{t}patch_embedder.input_proj", dims, params, clip=False)
        # the [2, size, width] table: row 0 the columns', row 1 the rows'. Each axis gathers from its own
        # half, so a position past the table (a strip wider than position_embedding_size patches, which HF
        # refuses with an IndexError) fails in onnxruntime's Gather too, never reading the other axis's rows
        table_name = f"{t}patch_embedder.position_embedding_table"
        table = b.initializer(table_name, params.tensor(table_name))
        x_table, y_table = (b.op("Gather", table, b.const(np.int64(i), f"axis{i}"), axis=0) for i in (0, 1))
        x = b.op("Add", x, b.op("Add", b.op("Gather", x_table, px), b.op("Gather", y_table, py)))
        x = typed(x, dtype, [N, P, d])
    cos, sin = _axial_rotary(b, px, py, dims, dtype)
    for i in range(dims.layers):
        with b.scope(f"encoder.layers.{i}"):
            x = _encoder_layer(b, x, (cos, sin), dims, params, f"{t}encoder.layers.{i}.")
    x = _pool(b, x, px, py, dims, params)
    x = b.op("Reshape", _project(b, x, dims, params), b.const([-1, dims.text_hidden], "feature_rows", "int64"))
    b.output(x, "image_features", dtype, [TOKENS, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _split(b: GraphBuilder, x: ir.Value, sizes: list[int]) -> list[ir.Value]:
    return b.op_multi("Split", x, b.const(sizes, "split", "int64"), axis=-1, outputs=len(sizes))


def _axial_rotary(
    b: GraphBuilder, px: ir.Value, py: ir.Value, dims: AxialVitDims, dtype: ir.DataType
) -> tuple[ir.Value, ir.Value]:
    """cos/sin [N, P, 1, head_dim]: angles x·f | x·f | y·f | y·f with f = θ^(-4i/head_dim),
    i < head_dim/4, computed in float32 and cast to the activation dtype."""
    half = dims.head_dim // 2
    inv_freq = 1.0 / (dims.theta ** (np.arange(0, half, 2, dtype=np.float32) / half))
    with b.scope("rotary"):
        freq = b.const(inv_freq.astype(np.float32), "inv_freq")
        ax, ay = (b.op("Mul", b.op("Unsqueeze", b.op("Cast", p, to=F32), b.const([-1], "last", "int64")), freq)
                  for p in (px, py))  # fmt: skip
        angles = b.op("Unsqueeze", b.op("Concat", ax, ax, ay, ay, axis=-1), b.const([2], "heads", "int64"))
        return cos_sin(b, angles, dtype)


def _encoder_layer(
    b: GraphBuilder, x: ir.Value, rotary: tuple[ir.Value, ir.Value], dims: AxialVitDims, params: Params, name: str
) -> ir.Value:
    h = _rms(b, x, f"{name}input_layernorm.weight", dims.eps, params)
    h = _rms(b, _attention(b, h, rotary, dims, params, f"{name}self_attn."), f"{name}post_attention_layernorm.weight",
             dims.eps, params)  # fmt: skip
    x = b.op("Add", x, h, name="attn_residual")
    h = _rms(b, x, f"{name}pre_feedforward_layernorm.weight", dims.eps, params)
    gate = b.op("Gelu", _linear(b, h, f"{name}mlp.gate_proj", dims, params), approximate=dims.approximate)
    h = _linear(b, b.op("Mul", gate, _linear(b, h, f"{name}mlp.up_proj", dims, params)), f"{name}mlp.down_proj", dims,
                params)  # fmt: skip
    h = _rms(b, h, f"{name}post_feedforward_layernorm.weight", dims.eps, params)
    return typed(b.op("Add", x, h, name="mlp_residual"), params.dtype, [N, P, dims.hidden])


def _attention(
    b: GraphBuilder, x: ir.Value, rotary: tuple[ir.Value, ir.Value], dims: AxialVitDims, params: Params, name: str
) -> ir.Value:
    """Bidirectional attention over one image's patches: per-head q/k norms (weights) and v norm
    (none), axial rotary on q and k, unit scale."""
    hd = dims.head_dim
    heads_shape = b.const([0, 0, -1, hd], "heads", "int64")
    flat = b.const([0, 0, -1], "flat", "int64")
    out = []
    for proj, norm in (("q_proj", "q_norm"), ("k_proj", "k_norm"), ("v_proj", None)):
        h = b.op("Reshape", _linear(b, x, f"{name}{proj}", dims, params), heads_shape)
        h = _rms(b, h, f"{name}{norm}.weight" if norm else None, dims.eps, params, width=hd)
        if norm:
            h = _rotate(b, h, *rotary, hd)
        out.append(b.op("Reshape", h, flat))
    q, k, v = out
    attn = b.op("Attention", q, k, v, q_num_heads=dims.heads, kv_num_heads=dims.kv_heads, scale=1.0)
    return _linear(b, attn, f"{name}o_proj", dims, params)


def _rotate(b: GraphBuilder, h: ir.Value, cos: ir.Value, sin: ir.Value, hd: int) -> ir.Value:
    """h·cos + rotate_half(h)·sin, rotate-half inside each half of the head ([a0 a1 | b0 b1] ->
    [-a1 a0 | -b1 b0])."""
    a0, a1, b0, b1 = _split(b, h, [hd // 4] * 4)
    turned = b.op("Concat", b.op("Neg", a1), a0, b.op("Neg", b1), b0, axis=-1)
    return b.op("Add", b.op("Mul", h, cos), b.op("Mul", turned, sin))


def _pool(b: GraphBuilder, x: ir.Value, px: ir.Value, py: ir.Value, dims: AxialVitDims, params: Params) -> ir.Value:
    """Average each k x k block of patches (block = x//k + (max x + 1)//k · (y//k), as HF numbers
    them), then x √width and the optional standardization, in float32."""
    k, d = dims.pool, dims.hidden
    with b.scope("pooler"):
        h = x if params.dtype == F32 else b.op("Cast", x, to=F32)
        if k > 1:
            kk = b.const(np.int64(k), "kernel")
            columns = b.op("Div", b.op("Add", b.op("ReduceMax", px, b.const([-1], "last", "int64"), keepdims=1),
                                       b.const(np.int64(1), "one")), kk)  # fmt: skip
            block = b.op("Add", b.op("Div", px, kk), b.op("Mul", columns, b.op("Div", py, kk)))  # [N, P]
            count = b.op("Div", b.op("Shape", x, start=1, end=2), b.const([k * k], "kernel_area", "int64"))
            tokens = b.op("Range", b.const(np.int64(0), "zero"), b.op("Squeeze", count), b.const(np.int64(1), "step"))
            hit = b.op("Equal", b.op("Unsqueeze", block, b.const([-1], "last", "int64")), tokens)  # [N, P, T]
            weights = b.op("Div", b.op("Cast", hit, to=F32), b.const(np.float32(k * k), "area"))
            h = b.op("MatMul", b.op("Transpose", weights, perm=[0, 2, 1]), h)
            if params.dtype != F32:  # HF returns the average in the tower's dtype before scaling
                h = b.op("Cast", b.op("Cast", h, to=params.dtype), to=F32)
        h = b.op("Mul", h, b.const(np.float32(math.sqrt(d)), "root_width"))
        if dims.standardize:
            bias, scale = (f"{dims.tower}std_{n}" for n in ("bias", "scale"))
            stored = Params(params.store, F32)
            h = b.op("Mul", b.op("Sub", h, b.initializer(bias, stored.vector([bias]))),
                     b.initializer(scale, stored.vector([scale])))  # fmt: skip
        return h if params.dtype == F32 else b.op("Cast", h, to=params.dtype)


def _project(b: GraphBuilder, x: ir.Value, dims: AxialVitDims, params: Params) -> ir.Value:
    """RMSNorm without weight, then the bias-free projection to the text width."""
    with b.scope("embed_vision"):
        h = _rms(b, x, None, dims.projector_eps, params, width=dims.hidden)
        name = f"{dims.projector}embed_vision.embedding_projection.weight"
        return matmul(b, h, name, params)


def _rms(
    b: GraphBuilder, x: ir.Value, weight: str | None, eps: float, params: Params, width: int | None = None
) -> ir.Value:
    """RMSNorm over the last axis in float32 (stash_type 1), the weight used as is (none: ones)."""
    if weight is None:
        w = b.const(np.ones(width or 1, NUMPY_DTYPES[params.dtype]), "ones")
    else:
        w = vector(b, weight, params)
    return rms_norm(b, x, w, eps)


def _linear(
    b: GraphBuilder, x: ir.Value, module: str, dims: AxialVitDims, params: Params, clip: bool = True
) -> ir.Value:
    """A clipped linear where the tower uses them (`clip`: the patch embedder's never is)."""
    return clipped_linear(b, x, module, clip and dims.clipped, params)
