"""Phi-3-vision's image tower as an onnx-ir graph: CLIP ViT over HD crops, each crop's patch grid merged
2 x 2 into channels, and the HD transform with its learned separators (docs/multimodal.md §21).

Inputs are what onnxruntime-genai's phi3v processor writes (onnxruntime-extensions' Phi3ImageTransform):
`pixel_values [N, C, 3, S, S]` float32 (per image its global view, then its crops row-major, zero crops up to C)
and `image_sizes [N, 2]` int64 (the padded HD image's height and width, multiples of S). Out:
`image_features [tokens, text hidden]`, the images' tokens one after another.

- each crop through CLIP's vision model: patch Conv (no bias), the class embedding in front, the position
  table, `pre_layrnorm`, the encoder layers up to `layers` (the remote code reads hidden_states[-2]: every
  layer but the last; no post norm), the class token dropped;
- each crop's M x M grid merged 2 x 2 into one feature of 4·d channels (a block's (row, column) patches side
  by side row-major), B = M / 2 features per side;
- per image, the HD transform as one gather: the h x w crops' grids joined into an (h·B, w·B) grid, each row
  followed by `sub_GN`; the global view's B x B grid, each row followed by `sub_GN`; the two blocks in
  `hd_transform_order` (`sub_glb`: crops first) with `glb_GN` between;
- `img_projection`: Linear, exact GELU, Linear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.encoder_ops import layer_norm, linear
from gqa_export.graph.encoders.hd_transform import crop_rows, token_places
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, C, T = "num_images", "num_crops", "num_image_tokens"
I64, F32 = ir.DataType.INT64, ir.DataType.FLOAT
QUICK_GELU = 1.702  # CLIP's quick_gelu: x · sigmoid(1.702 x)
CLIP_HEAD_DIM = 64  # every released CLIP ViT's (B, L, H): the remote code fixes ViT-L/14-336's 16 heads of 64
CLIP_EPS = 1e-5  # CLIPVisionConfig's layer_norm_eps, which the remote code keeps
PREFIX = "model.vision_embed_tokens."
# genai's phi3v processor (onnxruntime-extensions' Phi3ImageTransform) cuts 336-pixel crops and counts 144 merged
# features per crop, whatever the checkpoint says
RUNTIME_CROP, RUNTIME_TOKENS = 336, 144


@dataclass(frozen=True)
class ClipHdDims:
    """What the graph reads: the CLIP tower's sizes (the remote code fixes ViT-L/14-336's), the settings of
    `embd_layer`, the decoder's width and the tensors' prefix (`model.vision_embed_tokens.`)."""

    hidden: int  # d
    heads: int
    layers: int  # the encoder layers run (all but the last for layer_idx -2)
    crop: int  # S
    patch: int
    eps: float
    text_hidden: int
    prefix: str = PREFIX
    order: str = "sub_glb"  # hd_transform_order

    @property
    def grid(self) -> int:  # M: patches per crop side
        return self.crop // self.patch

    @property
    def merged(self) -> int:  # B: merged features per crop side
        return self.grid // 2


def clip_hd_dims(vision: dict[str, Any], text_hidden: int, store: WeightStore) -> ClipHdDims:
    """The tower's dims from the release's image settings (`embd_layer` + `img_processor`, the converted config's
    vision_config) and its tensors' shapes, or InputError naming what genai's phi3v package cannot run."""
    what = {k: vision.get(k) for k in ("use_hd_transform", "with_learnable_separator", "projection_cls")}
    if what != {"use_hd_transform": True, "with_learnable_separator": True, "projection_cls": "mlp"}:
        raise InputError(f"Phi-3-vision image settings {what}: only the HD transform with learned separators and "
                         "an MLP projection is exported; use --text-only")  # fmt: skip
    order, feature = vision.get("hd_transform_order", "glb_sub"), vision.get("type_feature", "patch")
    if order not in ("sub_glb", "glb_sub") or feature != "patch":
        raise InputError(f"Phi-3-vision hd_transform_order {order} / type_feature {feature}: use --text-only")
    t = f"{PREFIX}img_processor.vision_model."
    conv = store.info(f"{t}embeddings.patch_embedding.weight").shape  # [d, 3, patch, patch]
    hidden, patch = int(conv[0]), int(conv[-1])
    positions = int(store.info(f"{t}embeddings.position_embedding.weight").shape[0])
    crop = round((positions - 1) ** 0.5) * patch
    merged = (crop // patch) // 2
    if crop != RUNTIME_CROP or merged * merged != RUNTIME_TOKENS or hidden % CLIP_HEAD_DIM:
        raise InputError(
            f"CLIP tower of {crop}-pixel crops, {patch}-pixel patches, width {hidden}: onnxruntime-genai's phi3v "
            f"processor cuts {RUNTIME_CROP}-pixel crops of {RUNTIME_TOKENS} merged features (ViT-L/14-336's); "
            "use --text-only"
        )
    total = sum(1 for n in store.names() if n.startswith(f"{t}encoder.layers.") and n.endswith("layer_norm1.weight"))
    layer = int(vision.get("layer_idx", -2))
    layers = total + 1 + layer if layer < 0 else layer
    if not 0 <= layers <= total:
        raise InputError(f"Phi-3-vision layer_idx {layer} is outside the tower's {total} layers: use --text-only")
    return ClipHdDims(hidden, hidden // CLIP_HEAD_DIM, layers, crop, patch, CLIP_EPS, text_hidden, PREFIX, order)


def build_clip_hd(dims: ClipHdDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    s, t = dims.crop, f"{dims.prefix}img_processor.vision_model."
    pixels = b.input("pixel_values", F32, [N, C, 3, s, s])
    sizes = b.input("image_sizes", I64, [N, 2])
    x = b.op("Reshape", pixels, b.const([-1, 3, s, s], "crops", "int64"))
    x = x if params.dtype == F32 else b.op("Cast", x, to=params.dtype)
    x = _embeddings(b, x, dims, params, t)
    for i in range(dims.layers):
        with b.scope(f"encoder.layers.{i}"):
            x = _clip_layer(b, x, dims, params, f"{t}encoder.layers.{i}.")
    rows = _merged_rows(b, x, dims, params)
    with b.scope("projection"):
        y = b.op("Gather", rows, _hd_index(b, sizes, pixels, dims))
        p = f"{dims.prefix}img_projection."
        y = b.op("Gelu", linear(b, y, f"{p}0", params, bias_required=True), approximate="none")
        y = linear(b, y, f"{p}2", params, bias_required=True)
    b.output(y, "image_features", params.dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _embeddings(b: GraphBuilder, x: ir.Value, dims: ClipHdDims, params: Params, t: str) -> ir.Value:
    """[crops, 3, S, S] -> [crops, 1 + M·M, d]: CLIPVisionEmbeddings, then pre_layrnorm."""
    d, e = dims.hidden, f"{t}embeddings."
    with b.scope("embeddings"):
        w = b.initializer(f"{e}patch_embedding.weight", params.tensor(f"{e}patch_embedding.weight"))
        x = b.op("Conv", x, w, kernel_shape=[dims.patch] * 2, strides=[dims.patch] * 2)
        x = b.op("Transpose", b.op("Reshape", x, b.const([0, d, -1], "grid_flat", "int64")), perm=[0, 2, 1])
        cls = b.initializer(f"{e}class_embedding", params.tensor(f"{e}class_embedding"))
        crops = b.op("Shape", x, start=0, end=1)
        shape = b.op("Concat", crops, b.const([1, d], "cls_shape", "int64"), axis=0)
        x = b.op("Concat", b.op("Expand", cls, shape), x, axis=1)
        table = f"{e}position_embedding.weight"
        x = b.op("Add", x, b.initializer(table, params.tensor(table)))
        return layer_norm(b, x, f"{t}pre_layrnorm", dims.eps, params)


def _clip_layer(b: GraphBuilder, x: ir.Value, dims: ClipHdDims, params: Params, name: str) -> ir.Value:
    """CLIPEncoderLayer: pre-norm attention (all tokens see all), pre-norm quick_gelu MLP."""
    h = layer_norm(b, x, f"{name}layer_norm1", dims.eps, params)
    a = f"{name}self_attn."
    q, k, v = (linear(b, h, a + proj, params, bias_required=True) for proj in ("q_proj", "k_proj", "v_proj"))
    heads = dims.heads
    out = b.op("Attention", q, k, v, q_num_heads=heads, kv_num_heads=heads, scale=(dims.hidden // heads) ** -0.5)
    x = b.op("Add", x, linear(b, out, a + "out_proj", params, bias_required=True), name="attn_residual")
    h = linear(
        b, layer_norm(b, x, f"{name}layer_norm2", dims.eps, params), f"{name}mlp.fc1", params, bias_required=True
    )
    h = b.op("Mul", h, b.op("Sigmoid", b.op("Mul", h, b.const(QUICK_GELU, "quick_gelu", NUMPY_DTYPES[params.dtype]))))
    return b.op("Add", x, linear(b, h, f"{name}mlp.fc2", params, bias_required=True), name="mlp_residual")


def _merged_rows(b: GraphBuilder, x: ir.Value, dims: ClipHdDims, params: Params) -> ir.Value:
    """[crops, 1 + M·M, d] -> [crops·B·B + 2, 4d]: the class token dropped, each crop's 2 x 2 blocks merged
    into channels row-major, then the sub separator row and the global separator row."""
    d, bb = dims.hidden, dims.merged
    with b.scope("merge"):
        patches = b.op("Slice", x, b.const([1], "from1", "int64"), b.const([2**62], "to_end", "int64"),
                       b.const([1], "ax1", "int64"))  # fmt: skip
        grid = b.op("Reshape", patches, b.const([-1, bb, 2, bb, 2, d], "blocks", "int64"))
        merged = b.op("Transpose", grid, perm=[0, 1, 3, 2, 4, 5])  # [crops, B, B, 2, 2, d]
        rows = b.op("Reshape", merged, b.const([-1, 4 * d], "rows", "int64"))
        names = [f"{dims.prefix}sub_GN", f"{dims.prefix}glb_GN"]
        separators = b.op("Reshape", b.initializer("separators", params.flat(names)),
                          b.const([2, 4 * d], "sep", "int64"))  # fmt: skip
        return b.op("Concat", rows, separators, axis=0)


def _hd_index(b: GraphBuilder, sizes: ir.Value, pixels: ir.Value, dims: ClipHdDims) -> ir.Value:
    """[tokens] rows of `_merged_rows` in the remote code's HD-transform order (module docstring)."""
    c = b.const
    bb, s = dims.merged, dims.crop

    with b.scope("hd_transform"):
        hw = b.op("Div", sizes, c(s, "crop", "int64"))
        h, w = (b.op("Gather", hw, c(i, f"hw{i}", "int64"), axis=1) for i in range(2))  # [N]
        crops = b.op("Gather", b.op("Shape", pixels), c(1, "c_axis", "int64"))
        bbc = c(bb, "b", "int64")
        sub_len = b.op("Mul", b.op("Mul", h, bbc), b.op("Add", b.op("Mul", w, bbc), c(1, "one", "int64")))
        glb_len = bb * (bb + 1)
        count = b.op("Add", sub_len, c(1 + glb_len, "glb_len", "int64"))  # [N]
        image, j = token_places(b, count)  # each token's image, its place there
        length, wide = b.op("Gather", sub_len, image), b.op("Gather", w, image)
        row_of, sub_sep, glb_sep, _ = crop_rows(b, image, crops, pixels, bb)

        def in_sub(k: ir.Value) -> ir.Value:  # k-th token of the crops' block
            step = b.op("Add", b.op("Mul", wide, bbc), c(1, "one_s", "int64"))
            r, q = b.op("Div", k, step), b.op("Mod", k, step)
            crop = b.op("Add", b.op("Mul", b.op("Div", r, bbc), wide), b.op("Div", q, bbc))
            crop = b.op("Add", crop, c(1, "after_global", "int64"))
            closes = b.op("Equal", q, b.op("Sub", step, c(1, "one_q", "int64")))
            return b.op("Where", closes, sub_sep, row_of(crop, b.op("Mod", r, bbc), b.op("Mod", q, bbc)))

        def in_global(k: ir.Value) -> ir.Value:  # k-th token of the global view's block
            wide_g = c(bb + 1, "b1", "int64")
            r, q = b.op("Div", k, wide_g), b.op("Mod", k, wide_g)
            return b.op("Where", b.op("Equal", q, bbc), sub_sep, row_of(c(0, "global", "int64"), r, q))

        if dims.order == "sub_glb":
            first_len, first, second = length, in_sub, in_global
        else:
            first_len, first, second = c(glb_len, "glb_first", "int64"), in_global, in_sub
        rest = b.op("Sub", j, b.op("Add", first_len, c(1, "one_r", "int64")))
        after = b.op("Where", b.op("Equal", j, first_len), glb_sep, second(b.op("Max", rest, c(0, "z", "int64"))))
        return b.op("Where", b.op("Less", j, first_len), first(j), after)
