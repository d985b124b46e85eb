"""Phi-4-multimodal's image tower as an onnx-ir graph: SigLIP over HD crops, NaViT position
buckets, 2 x 2 pooling and the HD transform (docs/multimodal.md §15.1).

Inputs are what onnxruntime-genai's phi4mm processor writes (HF's Phi4MultimodalImageProcessor
writes the same three tensors): `pixel_values [N, C, 3, S, S]` float32 (per image its global view,
then its crops row-major, zero crops up to the batch's C), `image_sizes [N, 2]` int64 (the HD
image's height and width in pixels, multiples of S) and `image_attention_mask [N, C, M, M]` float
(M = S / patch; 0 on the patches of the white padding). Out: `image_features [tokens, text hidden]`,
the images' tokens one after another (rank 2: genai allocates num_image_tokens rows, the total).

- each crop through the tower: patch Conv + the learned table read at NaViT buckets (a patch's
  row and column scaled to the crop's own unpadded rows / columns, `bucketize` into the table's
  side), pre-norm SigLIP layers with padding keys masked, up to `feature_layer` (no post norm);
- each crop's M x M grid averaged in 2 x 2 blocks: B x B features (B = ceil(M / 2): an odd grid
  gets one more row and column by reflection first, as HF pads it);
- per image, HF's HD transform as one gather: the crops' grids joined into an (h·B, w·B) grid cut
  to the rows / columns the mask keeps, each row followed by `sub_img_feature_extensor`; then
  `global_img_feature_extensor`; then the global view's B rows, each followed by the sub separator;
- up-projection, exact GELU, down-projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.encoders.encoder_ops import GELU, key_bias, linear, masked_vit_layer, patch_embedding
from gqa_export.graph.encoders.hd_transform import crop_rows, token_places
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, C, T = "num_images", "num_crops", "num_image_tokens"
I64, F32 = ir.DataType.INT64, ir.DataType.FLOAT
FRACTION_CAP = 1.0 - 1e-6  # HF clamps the fractional coordinates below 1
# the order of a crop's pooled features in the HD grid: HF's (row, column); "columns" transposes
# each crop (a mutant the tests keep)
CROP_ORDER = "rows"
# an odd patch grid is padded by one row and column before pooling: HF's ReflectionPad2d((0, 1, 0, 1));
# "edge" repeats the last row / column instead (a mutant the tests keep)
ODD_PAD = "reflect"


@dataclass(frozen=True)
class HdCropDims:
    """The vision_config fields the graph reads."""

    hidden: int
    heads: int
    layers: int  # the encoder layers run: those up to feature_layer
    crop: int  # S: crop_size = image_size
    patch: int
    eps: float
    approximate: str
    text_hidden: int
    embed: str  # tensor prefix of the image embedding: `<embed>img_projection_up.weight`
    tower: str  # `<tower>embeddings.patch_embedding.weight`

    @property
    def grid(self) -> int:  # M: patches per crop side (= the position table's side)
        return self.crop // self.patch

    @property
    def pooled(self) -> int:  # B: features per crop side after the 2 x 2 pooling (an odd grid padded)
        return (self.grid + 1) // 2


def hd_crop_dims(hf_config: Any, text_hidden: int, store: WeightStore, base: int | None = None) -> HdCropDims:
    """The tower's dims, or InputError naming what this graph cannot compute. `base`: the pooled
    side a runtime's processor assumes (genai's phi4mm: 16), refused when the tower's differs."""
    vision = hf_config.vision_config
    act = str(getattr(vision, "hidden_act", "gelu_pytorch_tanh"))
    if act not in GELU:
        raise InputError(f"Phi-4-multimodal vision activation '{act}' is not supported: export with --text-only")
    crop, size, patch = int(vision.crop_size), int(vision.image_size), vision.patch_size
    if crop != size or not isinstance(patch, int) or crop % patch:
        raise InputError(
            f"vision crop_size {crop} / image_size {size} / patch_size {patch}: crops of the position table's "
            "size cut into whole patches are exported only; use --text-only"
        )
    pooled = (crop // patch + 1) // 2
    if base is not None and pooled != base:
        raise InputError(
            f"onnxruntime-genai's phi4mm processor counts {base} x {base} pooled features per crop, this tower "
            f"pools {pooled} x {pooled} (crop_size {crop}, patch_size {patch}): export with --text-only"
        )
    total = int(vision.num_hidden_layers)
    feature = int(getattr(vision, "feature_layer", -2))
    layers = total + 1 + feature if feature < 0 else feature
    if not 0 <= layers <= total:
        raise InputError(f"vision feature_layer {feature} is outside the tower's {total} layers: use --text-only")
    return HdCropDims(
        hidden=int(vision.hidden_size),
        heads=int(vision.num_attention_heads),
        layers=layers,
        crop=crop,
        patch=patch,
        eps=float(vision.layer_norm_eps),
        approximate=GELU[act],
        text_hidden=text_hidden,
        embed=tensor_prefix(store, "img_projection_up.weight"),
        tower=tensor_prefix(store, "embeddings.patch_embedding.weight"),
    )


def build_hd_crops(dims: HdCropDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    dtype, d, s, m, t = params.dtype, dims.hidden, dims.crop, dims.grid, dims.tower
    pixels = b.input("pixel_values", F32, [N, C, 3, s, s])
    sizes = b.input("image_sizes", I64, [N, 2])
    mask = b.input("image_attention_mask", dtype, [N, C, m, m])
    x = b.op("Reshape", pixels, b.const([-1, 3, s, s], "crops", "int64"))
    x = x if dtype == F32 else b.op("Cast", x, to=dtype)
    crops_mask = b.op("Reshape", mask, b.const([-1, m, m], "crop_masks", "int64"))
    with b.scope("embeddings"):
        x = patch_embedding(b, x, f"{t}embeddings.patch_embedding", dims.patch, d, params)
        table = f"{t}embeddings.position_embedding.weight"
        positions = b.op("Gather", b.initializer(table, params.tensor(table)), _navit_buckets(b, crops_mask, m))
        x = typed(b.op("Add", x, positions), dtype, ["crops", m * m, d])
    keys = b.op("Reshape", crops_mask, b.const([0, -1], "patch_mask", "int64"))
    bias = key_bias(b, keys, dtype)
    for i in range(dims.layers):
        with b.scope(f"encoder.layers.{i}"):
            x = masked_vit_layer(b, x, bias, dims, params, f"{t}encoder.layers.{i}.")
    rows = _pooled_rows(b, x, dims, params)
    index = _hd_index(b, sizes, mask, dims)
    with b.scope("projection"):
        y = b.op("Gather", rows, index)
        e = dims.embed
        y = b.op("Gelu", linear(b, y, f"{e}img_projection_up", params), approximate="none")
        y = linear(b, y, f"{e}img_projection_down", params)
    b.output(y, "image_features", dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def navit_table(side: int) -> np.ndarray:
    """[side + 1, side] buckets: row n holds HF's bucket of each patch index of a crop with n unpadded
    rows (or columns), as Phi4MultimodalVisionEmbeddings computes it in float32: the fraction
    i · (1/n), capped below 1, bucketized (`right=True`) by the boundaries arange(1/side, 1, 1/side).
    Computed here, not in the graph: onnxruntime's optimizer turns the product by 1/n into a division
    by n, which rounds differently and moves patches across boundaries (a 31-patch crop's 17th row)."""
    step = 1.0 / side
    bounds = (step + np.arange(int(np.ceil((1.0 - step) / step))) * step).astype(np.float32)
    table = np.zeros((side + 1, side), np.int64)
    for n in range(1, side + 1):
        frac = np.minimum(
            np.arange(side, dtype=np.float32) * (np.float32(1.0) / np.float32(n)), np.float32(FRACTION_CAP)
        )
        table[n] = (bounds[None, :] <= frac[:, None]).sum(axis=1)
    return table


def _navit_buckets(b: GraphBuilder, crops_mask: ir.Value, side: int) -> ir.Value:
    """[crops, M·M] position ids as HF's Phi4MultimodalVisionEmbeddings: row i of a crop with n
    unpadded rows at bucket `navit_table(side)[n, i]`, the same for columns; padding patches 0."""
    c = b.const
    with b.scope("navit_positions"):
        keep = b.op("Cast", crops_mask, to=ir.DataType.BOOL)  # [crops, M, M]
        counts = b.op("Cast", keep, to=I64)
        table = c(navit_table(side), "buckets")
        rows = b.op("Gather", table, b.op("ReduceSum", b.op("Gather", counts, c(0, "col0", "int64"), axis=2),
                                          c([1], "ax_h", "int64"), keepdims=0))  # fmt: skip
        cols = b.op("Gather", table, b.op("ReduceSum", b.op("Gather", counts, c(0, "row0", "int64"), axis=1),
                                          c([1], "ax_w", "int64"), keepdims=0))  # fmt: skip
        rows = b.op("Unsqueeze", b.op("Mul", rows, c(side, "side", "int64")), c([2], "ax_r", "int64"))
        ids = b.op("Add", rows, b.op("Unsqueeze", cols, c([1], "ax_c", "int64")))  # [crops, M, M]
        ids = b.op("Where", keep, ids, c(0, "pad_position", "int64"))
        return b.op("Reshape", ids, c([0, -1], "flat_ids", "int64"))


def _pooled_rows(b: GraphBuilder, x: ir.Value, dims: HdCropDims, params: Params) -> ir.Value:
    """[crops, M·M, d] -> [crops·B·B + 2, d]: each crop's grid averaged 2 x 2, row-major, then the
    sub-image separator row and the global separator row."""
    d, m = dims.hidden, dims.grid
    with b.scope("pool"):
        grid = b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1]), b.const([0, d, m, m], "grid", "int64"))
        if m % 2:  # one more row and column, reflected (HF's ReflectionPad2d((0, 1, 0, 1)))
            grid = b.op("Pad", grid, b.const([0, 0, 0, 0, 0, 0, 1, 1], "odd_pad", "int64"), mode=ODD_PAD)
        pooled = b.op("AveragePool", grid, kernel_shape=[2, 2], strides=[2, 2])  # [crops, d, B, B]
        perm = [0, 2, 3, 1] if CROP_ORDER == "rows" else [0, 3, 2, 1]
        rows = b.op("Reshape", b.op("Transpose", pooled, perm=perm), b.const([-1, d], "rows", "int64"))
        e = dims.embed
        names = [f"{e}sub_img_feature_extensor", f"{e}global_img_feature_extensor"]
        separators = b.op("Reshape", b.initializer("separators", params.flat(names)), b.const([2, d], "sep", "int64"))
        return b.op("Concat", rows, separators, axis=0)


def _hd_index(b: GraphBuilder, sizes: ir.Value, mask: ir.Value, dims: HdCropDims) -> ir.Value:
    """[tokens] rows of `_pooled_rows` in HF's HD-transform order (module docstring), per image:
    the h x w crops' grid cut to the useful rows / columns read from the mask's first crop column /
    row (each crop's mask sampled every second patch), rows closed by the sub separator, the
    global separator, the global view's B rows each closed by the sub separator."""
    c = b.const
    bb, s = dims.pooled, dims.crop

    def col(v: ir.Value, name: str) -> ir.Value:  # [N] -> [N, 1]
        return b.op("Unsqueeze", v, c([1], name, "int64"))

    with b.scope("hd_transform"):
        hw = b.op("Div", sizes, c(s, "crop", "int64"))
        h, w = (b.op("Gather", hw, c(i, f"hw{i}", "int64"), axis=1) for i in range(2))  # [N]
        shape = b.op("Shape", mask)
        crops = b.op("Gather", shape, c(1, "c_axis", "int64"))
        sampled = b.op("Slice", mask, c([0, 0], "s0", "int64"), c([2**62, 2**62], "s1", "int64"),
                       c([2, 3], "s_axes", "int64"), c([2, 2], "s_steps", "int64"))  # fmt: skip
        keep = b.op("Cast", b.op("Cast", sampled, to=ir.DataType.BOOL), to=I64)  # [N, C, B, B]
        first = c(0, "first", "int64")
        col_sum = b.op("ReduceSum", b.op("Gather", keep, first, axis=3), c([2], "r2", "int64"), keepdims=0)  # [N, C]
        row_sum = b.op("ReduceSum", b.op("Gather", keep, first, axis=2), c([2], "r3", "int64"), keepdims=0)
        sub = b.op("Sub", b.op("Range", c(0, "zero", "int64"), crops, c(1, "one", "int64")), c(1, "one_b", "int64"))
        sub = b.op("Unsqueeze", sub, c([0], "ax0", "int64"))  # [1, C]: -1 for the global view
        is_sub = b.op("GreaterOrEqual", sub, c(0, "zero_b", "int64"))
        in_area = b.op("And", is_sub, b.op("Less", sub, col(b.op("Mul", h, w), "ax_area")))
        first_col = b.op("And", in_area, b.op("Equal", b.op("Mod", sub, col(w, "ax_w")), c(0, "zero_c", "int64")))
        first_row = b.op("And", is_sub, b.op("Less", sub, col(w, "ax_w2")))
        zero = c(0, "zero_d", "int64")
        useful_h = b.op("ReduceSum", b.op("Where", first_col, col_sum, zero), c([1], "r4", "int64"), keepdims=0)
        useful_w = b.op("ReduceSum", b.op("Where", first_row, row_sum, zero), c([1], "r5", "int64"), keepdims=0)
        sub_len = b.op("Mul", useful_h, b.op("Add", useful_w, c(1, "one_c", "int64")))
        count = b.op("Add", sub_len, c(1 + bb * (bb + 1), "global_len", "int64"))  # [N]
        image, j = token_places(b, count)  # each token's image, its place there
        uw, length, wide = (b.op("Gather", v, image) for v in (useful_w, sub_len, w))
        row_of, sub_sep, glb_sep, bbc = crop_rows(b, image, crops, mask, bb)
        step = b.op("Add", uw, c(1, "one_f", "int64"))
        r, q = b.op("Div", j, step), b.op("Mod", j, step)
        crop = b.op("Add", b.op("Mul", b.op("Div", r, bbc), wide), b.op("Div", q, bbc))  # among the sub-crops
        crop = b.op("Add", crop, c(1, "one_g", "int64"))
        in_sub = b.op("Where", b.op("Equal", q, uw), sub_sep, row_of(crop, b.op("Mod", r, bbc), b.op("Mod", q, bbc)))
        g = b.op("Sub", j, b.op("Add", length, c(1, "one_h", "int64")))
        wide_g = c(bb + 1, "b1", "int64")
        gr, gq = b.op("Div", g, wide_g), b.op("Mod", g, wide_g)
        in_global = b.op("Where", b.op("Equal", gq, bbc), sub_sep, row_of(c(0, "global", "int64"), gr, gq))
        after = b.op("Where", b.op("Equal", j, length), glb_sep, in_global)
        return b.op("Where", b.op("Less", j, length), in_sub, after)
