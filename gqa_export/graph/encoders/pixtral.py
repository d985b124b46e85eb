"""The Pixtral vision tower and Mistral-3's multimodal projector as an onnx-ir graph
(docs/multimodal.md §12).

`pixel_values [N, 3, H, W]` (images padded with zeros to the largest one, bottom and right) and
`image_sizes [N, 2]` int64 (each image's real height and width in pixels) in (or one image
cropped to its size with any image_sizes: how genai runs several images),
`image_features [tokens, text hidden]` out, the images' tokens one after another:

- patch convolution (kernel = stride = patch, no bias) over the padded batch; each image's rows
  and columns inside its real size are kept, row-major, image after image (`Compress`), so one
  graph serves any number of images of any sizes;
- RMSNorm (ln_pre), then pre-norm layers: RMSNorm -> q/k/v (no biases) with a 2-D rotary
  embedding -> attention of each patch over its own image's patches only (an additive
  block-diagonal bias from the patch's image index) -> o_proj; RMSNorm -> gated MLP;
- the projector: RMSNorm (the text model's eps), the patch merger (each image's grid cut into
  merge x merge blocks, row-major; a block's rows read as one row channel-major, as
  torch.nn.functional.unfold lays them out), a Linear, then Linear -> act -> Linear.

The 2-D rotary angles are computed from each patch's (row, column) in the graph: the even
frequencies of theta^(-2i/head_dim) turn with the row, the odd ones with the column, the two
halves concatenated and repeated over the whole head (rotate-half). No table bounds the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.encoders.encoder_ops import activation, cos_sin, linear, patch_attention, rms_norm, vector
from gqa_export.graph.encoders.patch_grid import segment_bias
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 21}
N, P, T = "num_images", "num_patches", "num_image_tokens"
I64 = ir.DataType.INT64
TOWER_EPS = 1e-5  # Pixtral builds its RMSNorms with a fixed eps
ACTIVATIONS = ("silu", "gelu", "gelu_pytorch_tanh")
# [tokens, merge², d] -> [tokens, d, merge²]: a merged row is channel-major, as unfold lays it out
BLOCK_ROW_PERM = (0, 2, 1)


@dataclass(frozen=True)
class PixtralDims:
    """The vision_config and projector fields the graph reads."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    patch: int
    merge: int
    rope_theta: float
    act: str  # the tower's MLP activation (gated)
    projector_act: str
    projector_eps: float  # the projector's RMSNorm: the text model's rms_norm_eps
    text_hidden: int
    tower: str  # tensor prefix: `<tower>patch_conv.weight`
    projector: str  # tensor prefix: `<projector>patch_merger.merging_layer.weight`

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def pixtral_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> PixtralDims:
    """The tower's dims, or InputError naming what this graph cannot compute."""
    vision = hf_config.vision_config
    layer = getattr(hf_config, "vision_feature_layer", -1)
    if layer not in (-1, int(vision.num_hidden_layers)):
        raise InputError(f"vision_feature_layer {layer}: only the last layer's features are exported; use --text-only")
    acts = (str(getattr(vision, "hidden_act", "gelu")), str(getattr(hf_config, "projector_hidden_act", "gelu")))
    for act in acts:
        if act not in ACTIVATIONS:
            raise InputError(f"Pixtral activation '{act}' is not supported: export with --text-only")
    rope = getattr(vision, "rope_parameters", None) or {}
    if rope.get("rope_type", "axial") != "axial":
        raise InputError(f"Pixtral rope_type '{rope.get('rope_type')}' is not the axial 2-D rope: use --text-only")
    patch = vision.patch_size
    if not isinstance(patch, int):
        raise InputError(f"Pixtral patch_size {patch} is not square: export with --text-only")
    return PixtralDims(
        hidden=int(vision.hidden_size),
        heads=int(vision.num_attention_heads),
        layers=int(vision.num_hidden_layers),
        intermediate=int(vision.intermediate_size),
        patch=int(patch),
        merge=int(hf_config.spatial_merge_size),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        act=acts[0],
        projector_act=acts[1],
        projector_eps=float(getattr(hf_config.text_config, "rms_norm_eps", 1e-6)),
        text_hidden=text_hidden,
        tower=tensor_prefix(store, "patch_conv.weight"),
        projector=tensor_prefix(store, "patch_merger.merging_layer.weight"),
    )


def build_pixtral(dims: PixtralDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    t = _Tower(b, dims, params)
    pixels = b.input("pixel_values", ir.DataType.FLOAT, [N, 3, "height", "width"])
    sizes = b.input("image_sizes", I64, ["image_sizes_rows", 2])
    x = pixels if params.dtype == ir.DataType.FLOAT else b.op("Cast", pixels, to=params.dtype)
    with b.scope("patch_conv"):
        conv = f"{dims.tower}patch_conv.weight"
        x = b.op("Conv", x, b.initializer(conv, params.tensor(conv)), kernel_shape=[dims.patch] * 2,
                 strides=[dims.patch] * 2)  # fmt: skip
        x, grid = t.kept_patches(x, pixels, sizes)
    x = t.norm(x, f"{dims.tower}ln_pre", TOWER_EPS)
    cos, sin = t.rotary(grid.h, grid.w)
    bias = segment_bias(b, grid.image, params.dtype, "image_mask")
    for i in range(dims.layers):
        with b.scope(f"layers.{i}"):
            x = t.layer(f"{dims.tower}transformer.layers.{i}.", x, cos, sin, bias)
    m = dims.projector
    with b.scope("projector"):
        y = t.norm(x, f"{m}norm", dims.projector_eps)
        y = t.linear(t.merged_blocks(y, grid), f"{m}patch_merger.merging_layer")
        y = t.linear(t.activation(t.linear(y, f"{m}linear_1"), dims.projector_act), f"{m}linear_2")
    b.output(y, "image_features", params.dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


@dataclass(frozen=True)
class _Grid:
    """Per kept patch (int64 [P]): its image, row, column, and its image's width and height in
    patches."""

    image: ir.Value
    h: ir.Value
    w: ir.Value
    width: ir.Value
    height: ir.Value


class _Tower:
    def __init__(self, b: GraphBuilder, dims: PixtralDims, params: Params) -> None:
        self.b, self.dims, self.params = b, dims, params

    def c(self, value: int | list[int], name: str) -> ir.Value:
        return self.b.const(value, name, "int64")

    def kept_patches(self, conv: ir.Value, pixels: ir.Value, sizes: ir.Value) -> tuple[ir.Value, _Grid]:
        """conv [N, d, gh, gw] -> the rows inside each image's real size, [P, d], image-major and
        row-major within an image (HF's order), and each row's coordinates."""
        b, c, d = self.b, self.c, self.dims.hidden
        shape = b.op("Shape", conv)
        n, gh, gw = (b.op("Gather", shape, c(i, f"dim{i}")) for i in (0, 2, 3))
        rows = b.op("Reshape", b.op("Transpose", conv, perm=[0, 2, 3, 1]), c([-1, d], "patch_rows"))
        zero, one = c(0, "zero"), c(1, "one")
        count = b.op("Mul", b.op("Mul", n, gh), gw)
        index = b.op("Range", zero, count, one)  # every padded patch
        per_image = b.op("Mul", gh, gw)
        image, within = b.op("Div", index, per_image), b.op("Mod", index, per_image)
        h, w = b.op("Div", within, gw), b.op("Mod", within, gw)
        # genai runs several images one at a time, each cropped to its size, with the whole
        # image_sizes [images, 2] bound (docs/multimodal.md §12): where its rows are not the
        # pixel batch's, the pixels are one image and their own height and width are its size
        own = b.op("Unsqueeze", b.op("Shape", pixels, start=2, end=4), c([0], "row"))  # [1, 2]
        matches = b.op("Equal", b.op("Shape", sizes, start=0, end=1), b.op("Shape", pixels, start=0, end=1))
        sizes = b.op("Where", matches, sizes, own)
        real = b.op("Div", sizes, c(self.dims.patch, "patch"))  # [N, 2] patches a side
        height = b.op("Gather", b.op("Gather", real, zero, axis=1), image)
        width = b.op("Gather", b.op("Gather", real, one, axis=1), image)
        keep = b.op("And", b.op("Less", h, height), b.op("Less", w, width))
        kept = [b.op("Compress", v, keep, axis=0) for v in (rows, image, h, w, width, height)]
        x = typed(kept[0], self.params.dtype, [P, d])
        return x, _Grid(*kept[1:])

    def merged_blocks(self, x: ir.Value, grid: _Grid) -> ir.Value:
        """[P, d] -> [tokens, d·merge²]: per image, merge x merge blocks in row-major block order
        (blocks cut by the grid's right or bottom edge dropped, as unfold does); a block's row
        is channel-major over its patches (row-major within the block)."""
        b, c, m, d = self.b, self.c, self.dims.merge, self.dims.hidden
        with b.scope("patch_merger"):
            mm = c(m, "merge")
            index = b.op("Range", c(0, "zero"), b.op("Shape", grid.h, start=0, end=1), c(1, "one"))
            zero = c(0, "zero_i")
            on_h, on_w = (b.op("Equal", b.op("Mod", v, mm), zero) for v in (grid.h, grid.w))
            corner = b.op("And", on_h, on_w)
            fits_w = b.op("LessOrEqual", b.op("Add", grid.w, mm), grid.width)
            fits_h = b.op("LessOrEqual", b.op("Add", grid.h, mm), grid.height)
            top_left = b.op("Compress", index, b.op("And", corner, b.op("And", fits_w, fits_h)), axis=0)  # [T]
            width = b.op("Gather", grid.width, top_left)
            ki = np.repeat(np.arange(m), m)
            kj = np.tile(np.arange(m), m)
            offsets = b.op(
                "Add",
                b.op("Mul", b.op("Unsqueeze", width, c([1], "ax1")), self.c(ki.tolist(), "block_rows")),
                self.c(kj.tolist(), "block_cols"),
            )  # [T, m²]
            gathered = b.op("Gather", x, b.op("Add", b.op("Unsqueeze", top_left, c([1], "ax1b")), offsets))
            return b.op("Reshape", b.op("Transpose", gathered, perm=list(BLOCK_ROW_PERM)), c([-1, d * m * m], "merged"))

    def linear(self, x: ir.Value, module: str) -> ir.Value:
        return linear(self.b, x, module, self.params)

    def norm(self, x: ir.Value, module: str, eps: float) -> ir.Value:
        """RMSNorm: weight * x / sqrt(mean(x²) + eps) (HF's in float32: the same at fp32)."""
        return rms_norm(self.b, x, vector(self.b, f"{module}.weight", self.params), eps)

    def activation(self, x: ir.Value, act: str) -> ir.Value:
        return activation(self.b, x, act, self.params.dtype)

    def rotary(self, pos_h: ir.Value, pos_w: ir.Value) -> tuple[ir.Value, ir.Value]:
        """cos/sin [P, 1, head_dim]: h·f_even | w·f_odd, f_i = theta^(-2i/head_dim), repeated twice."""
        b, hd = self.b, self.dims.head_dim
        inv = 1.0 / (self.dims.rope_theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
        with b.scope("rotary"):
            col = self.c([1], "col")
            ang = [
                b.op("Mul", b.op("Unsqueeze", b.op("Cast", p, to=ir.DataType.FLOAT), col), b.const(f, name))
                for p, f, name in ((pos_h, inv[0::2], "inv_freq_h"), (pos_w, inv[1::2], "inv_freq_w"))
            ]
            half = b.op("Concat", *ang, axis=-1)
            angles = b.op("Unsqueeze", b.op("Concat", half, half, axis=-1), col)
            return cos_sin(b, angles, self.params.dtype)

    def layer(self, name: str, x: ir.Value, cos: ir.Value, sin: ir.Value, bias: ir.Value) -> ir.Value:
        b, dtype, hidden = self.b, self.params.dtype, [P, self.dims.hidden]
        h = self.attention(self.norm(x, f"{name}attention_norm", TOWER_EPS), f"{name}attention.", cos, sin, bias)
        x = typed(b.op("Add", x, h, name="attn_residual"), dtype, hidden)
        h = self.norm(x, f"{name}ffn_norm", TOWER_EPS)
        f = f"{name}feed_forward."
        gate = self.activation(self.linear(h, f"{f}gate_proj"), self.dims.act)
        h = self.linear(b.op("Mul", gate, self.linear(h, f"{f}up_proj")), f"{f}down_proj")
        return typed(b.op("Add", x, h, name="mlp_residual"), dtype, hidden)

    def attention(self, x: ir.Value, name: str, cos: ir.Value, sin: ir.Value, bias: ir.Value) -> ir.Value:
        """Each patch attends over its own image's patches (`bias`: block-diagonal)."""
        b, heads, hd = self.b, self.dims.heads, self.dims.head_dim
        with b.scope("attn"):
            shape = self.c([0, heads, hd], "heads")
            q, k, v = (b.op("Reshape", self.linear(x, f"{name}{p}_proj"), shape) for p in "qkv")
            out = patch_attention(b, (q, k, v), (cos, sin), bias, hd, self.params.dtype)
            return self.linear(out, f"{name}o_proj")
