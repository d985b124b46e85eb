"""A SigLIP2 NaFlex vision tower and LFM2-VL's pixel-unshuffle projector as an onnx-ir graph
(docs/multimodal.md §14.1).

Inputs are what onnxruntime-genai's lfm2_vl processor writes (and HF's Lfm2VlImageProcessor):
`pixel_values [N, P, 3·p·p]` float32 (each image's patches row-major, each patch's pixels
row-major with the channels last, padded with zero rows to P = max_num_patches),
`attention_mask [N, P]` int64 (1 on an image's own patches) and `image_sizes [N, 2]` int64 (each
image's rows and columns in patches). Out: `image_features [tokens, text hidden]`, the images'
tokens one after another (rank 2: genai allocates num_image_tokens rows, the total).

- patch embedding: one Linear over each patch's pixels, plus the learned G x G position table
  resized to the image's grid (graph/encoders/antialias_positions.py);
- pre-norm SigLIP layers (LayerNorm, attention with biases over the image's own patches: padding
  keys masked, LayerNorm, fc1 -> GELU -> fc2), then the post LayerNorm;
- the projector: each image's grid cut into f x f blocks (f = downsample_factor), row-major; a
  block's f² patches side by side in one row, row-major within the block (HF's pixel unshuffle),
  then LayerNorm (where the checkpoint has one) -> Linear -> GELU -> Linear.
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
from gqa_export.graph.encoders.antialias_positions import resized_positions
from gqa_export.graph.encoders.encoder_ops import GELU, key_bias, layer_norm, linear, masked_vit_layer
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, P, T = "num_images", "max_num_patches", "num_image_tokens"
I64 = ir.DataType.INT64
PROJECTOR_NORM_EPS = 1e-5  # the projector's nn.LayerNorm keeps torch's default eps
# a block's patches in a token's row: row-major within the block (HF's pixel unshuffle); "columns"
# reads them column-major (a mutant the tests keep)
BLOCK_ORDER = "rows"


@dataclass(frozen=True)
class NaflexDims:
    """The vision_config and projector fields the graph reads."""

    hidden: int
    heads: int
    layers: int
    patch: int
    side: int  # the learned position table is side x side
    eps: float
    approximate: str  # the tower's GELU
    factor: int  # downsample_factor: f x f patches per token
    projector_approximate: str
    projector_norm: bool
    text_hidden: int
    tower: str  # tensor prefix: `<tower>embeddings.patch_embedding.weight`
    projector: str  # tensor prefix: `<projector>linear_1.weight`


def naflex_vit_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> NaflexDims:
    """The tower's dims, or InputError naming what this graph cannot compute."""
    vision = hf_config.vision_config
    acts = (str(getattr(vision, "hidden_act", "gelu_pytorch_tanh")), str(hf_config.projector_hidden_act))
    for act in acts:
        if act not in GELU:
            raise InputError(f"LFM2-VL activation '{act}' is not supported: export with --text-only")
    layer = getattr(hf_config, "vision_feature_layer", -1)
    if layer not in (-1, int(vision.num_hidden_layers)):
        raise InputError(f"vision_feature_layer {layer}: only the last layer's features are exported; use --text-only")
    side = math.isqrt(int(vision.num_patches))
    if side * side != int(vision.num_patches) or not isinstance(vision.patch_size, int):
        raise InputError(
            f"vision num_patches {vision.num_patches} / patch_size {vision.patch_size}: a square position table "
            "and square patches are exported only; use --text-only"
        )
    return NaflexDims(
        hidden=int(vision.hidden_size),
        heads=int(vision.num_attention_heads),
        layers=int(vision.num_hidden_layers),
        patch=int(vision.patch_size),
        side=side,
        eps=float(vision.layer_norm_eps),
        approximate=GELU[acts[0]],
        factor=int(hf_config.downsample_factor),
        projector_approximate=GELU[acts[1]],
        projector_norm=bool(getattr(hf_config, "projector_use_layernorm", True)),
        text_hidden=text_hidden,
        tower=tensor_prefix(store, "embeddings.patch_embedding.weight"),
        projector=tensor_prefix(store, "multi_modal_projector.linear_1.weight") + "multi_modal_projector.",
    )


def build_naflex_vit(dims: NaflexDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    dtype, d, t = params.dtype, dims.hidden, dims.tower
    pixels = b.input("pixel_values", ir.DataType.FLOAT, [N, P, 3 * dims.patch * dims.patch])
    mask = b.input("attention_mask", I64, [N, P])
    sizes = b.input("image_sizes", I64, [N, 2])
    x = pixels if dtype == ir.DataType.FLOAT else b.op("Cast", pixels, to=dtype)
    with b.scope("embeddings"):
        x = linear(b, x, f"{t}embeddings.patch_embedding", params)
        table = f"{t}embeddings.position_embedding.weight"
        patches = b.op("Shape", pixels, start=1, end=2)
        positions = resized_positions(b, b.initializer(table, params.tensor(table)), dims.side, sizes, patches, dtype)
        x = typed(b.op("Add", x, positions), dtype, [N, P, d])
    bias = key_bias(b, mask, dtype)
    for i in range(dims.layers):
        with b.scope(f"encoder.layers.{i}"):
            x = masked_vit_layer(b, x, bias, dims, params, f"{t}encoder.layers.{i}.")
    x = layer_norm(b, x, f"{t}post_layernorm", dims.eps, params)
    y = _projector(b, _unshuffled_tokens(b, x, sizes, dims), dims, params)
    b.output(y, "image_features", dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _unshuffled_tokens(b: GraphBuilder, x: ir.Value, sizes: ir.Value, dims: NaflexDims) -> ir.Value:
    """[N, P, d] -> [tokens, f²·d]: per image, its f x f patch blocks in row-major block order,
    a block's patches side by side row-major (patch (i, j) of the block at columns (i·f + j)·d);
    blocks cut by the grid's edge dropped; images one after another."""
    c = b.const
    f, d = dims.factor, dims.hidden
    with b.scope("pixel_unshuffle"):
        shape = b.op("Shape", x)
        n, p = b.op("Gather", shape, c(0, "n", "int64")), b.op("Gather", shape, c(1, "p", "int64"))
        slots = b.op("Div", p, c(f * f, "block", "int64"))  # an image has at most P / f² tokens
        token = b.op(
            "Unsqueeze", b.op("Range", c(0, "zero", "int64"), slots, c(1, "one", "int64")), c([0], "ax0", "int64")
        )
        ff = c(f, "f", "int64")
        rows, cols = b.op_multi("Split", sizes, c([1, 1], "split", "int64"), axis=1, outputs=2, name="hw")  # [N, 1]
        wide = b.op("Max", b.op("Div", cols, ff), c(1, "min_wide", "int64"))
        tokens = b.op("Mul", b.op("Div", rows, ff), b.op("Div", cols, ff))
        valid = b.op("Less", token, tokens)  # [N, slots]
        start = b.op("Mul", b.op("Range", c(0, "zero_n", "int64"), n, c(1, "one_n", "int64")), p)
        corner = b.op("Add", b.op("Mul", b.op("Mul", b.op("Div", token, wide), ff), cols),
                      b.op("Mul", b.op("Mod", token, wide), ff))  # fmt: skip
        corner = b.op("Add", corner, b.op("Unsqueeze", start, c([1], "ax1", "int64")))  # [N, slots]
        ki, kj = np.repeat(np.arange(f), f), np.tile(np.arange(f), f)
        if BLOCK_ORDER == "columns":
            ki, kj = kj, ki
        offsets = b.op(
            "Add",
            b.op("Mul", b.op("Unsqueeze", cols, c([2], "ax2", "int64")), c(ki.tolist(), "ki", "int64")),
            c(kj.tolist(), "kj", "int64"),
        )  # [N, 1, f²]
        index = b.op("Add", b.op("Unsqueeze", corner, c([2], "ax2b", "int64")), offsets)  # [N, slots, f²]
        index = b.op("Where", b.op("Unsqueeze", valid, c([2], "ax2c", "int64")), index, c(0, "pad", "int64"))
        flat = b.op("Reshape", x, c([-1, d], "patch_rows", "int64"))
        blocks = b.op("Gather", flat, b.op("Reshape", index, c([-1, f * f], "slot_rows", "int64")))
        rows_out = b.op("Reshape", blocks, c([-1, f * f * d], "unshuffled", "int64"))
        return b.op("Compress", rows_out, b.op("Reshape", valid, c([-1], "valid_flat", "int64")), axis=0)


def _projector(b: GraphBuilder, x: ir.Value, dims: NaflexDims, params: Params) -> ir.Value:
    m = dims.projector
    with b.scope("projector"):
        if dims.projector_norm:
            x = layer_norm(b, x, f"{m}layer_norm", PROJECTOR_NORM_EPS, params)
        x = b.op("Gelu", linear(b, x, f"{m}linear_1", params), approximate=dims.projector_approximate)
        return linear(b, x, f"{m}linear_2", params)
