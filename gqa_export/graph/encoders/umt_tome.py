"""VideoChat-Flash's image side as an onnx-ir graph: the UMT-L video ViT on single images, its tokens merged by
bipartite soft matching (ToMe) down to a fixed count, and the 2-layer MLP projector (docs/coverage.md §36).

Input is what onnxruntime-genai's videochat_flash_qwen processor writes: `pixel_values [1, N, 3, S, S]` float32, the
prompt's N images (each resized to S x S, rescaled, normalized). Out: `image_features [N·K, text hidden]`, each
image's K merged tokens in turn (K = 64: the remote code's image path, `compress=False`).

- the tower (`model.vision_tower.vision_tower.encoder.`): a Conv3d of one-frame tubelets (kernel = stride =
  (1, p, p), biased) over each image, the fixed sine-cosine table of one frame added (the remote code's
  `img_pos_embed`; for S != 224 the 14 x 14 table resized bicubically to the grid, as its
  `get_sinusoid_encoding_table2`), pre-norm blocks (LayerNorm eps 1e-6, 16-head attention whose q and v have
  biases and k none, exact-GELU MLP), every block the checkpoint holds (the remote code builds 24 +
  `mm_vision_select_layer` + 1 of them and runs them all), then `vision_layernorm` (eps 1e-12);
- the merge (`model.mm_projector.`): rounds of ToMe until K tokens are left (each removes at most half, the
  counts fixed by the grid). A round's metric is the tokens' channels averaged over the 16 heads' slices and
  L2-normalized; even tokens (a) score against odd ones (b) by cosine; each a takes its best b (first on ties);
  the a's sorted by that score, best first: the r best are added into their b, the rest kept in that order. The
  kept a's, then the b's, each a weighted average of the tokens merged into it by their sizes (how many
  original tokens each holds);
- `mlp`: Linear, exact GELU, Linear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.encoder_ops import layer_norm, linear
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, T = "num_images", "num_image_tokens"
F32 = ir.DataType.FLOAT
TOWER = "model.vision_tower.vision_tower.encoder."
PROJECTOR = "model.mm_projector."
UMT_HEADS = 16  # the remote code's build_vit and UMTVisionConfig fix 16 heads, whatever the width
IMAGE_TOKENS = 64  # ToMe16_mlp_hd64's count for an image (compress=False)
BLOCK_EPS, FINAL_EPS = 1e-6, 1e-12  # the blocks' LayerNorms, vision_layernorm
TABLE_GRID = 14  # the checkpoint's sine-cosine grid (224-pixel frames of 16-pixel patches)
BEST_FIRST = 1  # TopK's `largest`: the a tokens in their best match's descending order


@dataclass(frozen=True)
class UmtDims:
    """What the graph reads: the tower's width, patch and depth from its tensors, the frame size from
    `mm_vision_tower` (the remote code: 448 for `umt-hd*`, else 224), the decoder's width."""

    hidden: int
    layers: int  # the blocks stored, all run (the remote code builds only those mm_vision_select_layer keeps)
    image: int  # S
    patch: int
    text_hidden: int
    tokens: int = IMAGE_TOKENS
    heads: int = UMT_HEADS

    @property
    def grid(self) -> int:
        return self.image // self.patch

    def merges(self) -> list[int]:
        """The tokens each ToMe round removes (the remote code's merge_tokens schedule)."""
        left, out = self.grid * self.grid, []
        while left != self.tokens:
            r = left - self.tokens if left - self.tokens <= left // 2 else left // 2
            out.append(r)
            left -= r
        return out


def umt_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> UmtDims:
    """The tower's dims from the release's `mm_*` keys and its tensors' shapes (the blocks: as many as it stores),
    or InputError naming what genai's videochat_flash_qwen package cannot run."""
    tower = str(getattr(hf_config, "mm_vision_tower", ""))
    projector = getattr(hf_config, "mm_projector_type", None)
    if "umt" not in tower or projector != "tome16_mlp_hd64":
        raise InputError(
            f"VideoChat-Flash mm_vision_tower {tower!r} / mm_projector_type {projector!r}: only the UMT tower with "
            "the tome16_mlp_hd64 projector is exported (InternVideo2 is not); use --text-only"
        )
    if getattr(hf_config, "mm_llm_compress", False):
        raise InputError("VideoChat-Flash mm_llm_compress drops image tokens inside the decoder's layers at prefill "
                         "(a per-layer cache genai does not keep): set it false, or use --text-only")  # fmt: skip
    if "unpad" in str(getattr(hf_config, "mm_patch_merge_type", "")):
        raise InputError("VideoChat-Flash mm_patch_merge_type with unpad (an image_newline row) is not exported; "
                         "use --text-only")  # fmt: skip
    conv = store.info(f"{TOWER}patch_embed.proj.weight").shape  # [d, 3, 1, p, p]
    hidden, patch = int(conv[0]), int(conv[-1])
    total = sum(1 for n in store.names() if n.startswith(f"{TOWER}blocks.") and n.endswith(".norm1.weight"))
    layers = total
    image = 448 if "umt-hd" in tower else 224
    if len(conv) != 5 or int(conv[2]) != 1 or hidden % UMT_HEADS or image % patch or not layers:
        raise InputError(f"UMT tower of width {hidden}, kernel {list(conv)}, {total} blocks: "
                         "not the remote code's one-frame-tubelet ViT; use --text-only")  # fmt: skip
    dims = UmtDims(hidden, layers, image, patch, text_hidden)
    if dims.grid**2 <= IMAGE_TOKENS:
        raise InputError(f"a {dims.grid} x {dims.grid} patch grid cannot merge to {IMAGE_TOKENS} tokens")
    return dims


def sinusoid_table(positions: int, width: int) -> np.ndarray:
    """[positions, width] float32: sin(pos / 10000^(2⌊j/2⌋/width)) on even j, cos on odd (float64, then float32)."""
    exponent = 2 * (np.arange(width) // 2) / width
    angles = np.arange(positions, dtype=np.float64)[:, None] / np.power(10000, exponent)[None, :]
    table = angles.copy()
    table[:, 0::2], table[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
    return table.astype(np.float32)


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """[n, 4] Keys cubic convolution weights (a = -0.75, torch's bicubic) for offsets t in [0, 1)."""
    d = np.stack([t + 1, t, 1 - t, 2 - t], axis=1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, far)


def _bicubic_matrix(size_in: int, size_out: int) -> np.ndarray:
    """[out, in]: bicubic resampling without corner alignment, border samples clamped (interpolate's bicubic)."""
    x = (np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5
    base = np.floor(x)
    weights = _cubic_weights(x - base)
    matrix = np.zeros((size_out, size_in))
    for k in range(4):
        np.add.at(matrix, (np.arange(size_out), np.clip(base.astype(int) - 1 + k, 0, size_in - 1)), weights[:, k])
    return matrix


def position_table(dims: UmtDims) -> np.ndarray:
    """[grid², width]: one frame's sine-cosine table, the checkpoint's 14 x 14 grid resized to the frame's."""
    table = sinusoid_table(TABLE_GRID * TABLE_GRID, dims.hidden)
    if dims.grid == TABLE_GRID:
        return table
    m = _bicubic_matrix(TABLE_GRID, dims.grid)
    grid = table.astype(np.float64).reshape(TABLE_GRID, TABLE_GRID, -1)
    return np.einsum("yi,xj,ijc->yxc", m, m, grid).reshape(dims.grid**2, -1).astype(np.float32)


def build_umt_tome(dims: UmtDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    s, d = dims.image, dims.hidden
    pixels = b.input("pixel_values", F32, [1, N, 3, s, s])
    x = b.op("Reshape", pixels, b.const([-1, 3, s, s], "images", "int64"))
    x = x if params.dtype == F32 else b.op("Cast", x, to=params.dtype)
    with b.scope("patch_embed"):
        name = f"{TOWER}patch_embed.proj.weight"
        w = params.computed((d, 3, dims.patch, dims.patch), lambda: params.store.read(name)[:, :, 0])
        x = b.op("Conv", x, b.initializer(name, w), b.initializer(f"{TOWER}patch_embed.proj.bias",
                 params.tensor(f"{TOWER}patch_embed.proj.bias")), kernel_shape=[dims.patch] * 2,
                 strides=[dims.patch] * 2)  # fmt: skip
        x = b.op("Transpose", b.op("Reshape", x, b.const([0, d, -1], "grid_flat", "int64")), perm=[0, 2, 1])
        x = b.op("Add", x, b.initializer("img_pos_embed", params.table(position_table(dims))))
    for i in range(dims.layers):
        with b.scope(f"blocks.{i}"):
            x = _block(b, x, dims, params, f"{TOWER}blocks.{i}.")
    x = layer_norm(b, x, f"{TOWER}vision_layernorm", FINAL_EPS, params)
    size = None
    for i, r in enumerate(dims.merges()):
        with b.scope(f"tome.{i}"):
            x, size = _merge_round(b, x, size, r, dims, params.dtype)
    with b.scope("mlp"):
        y = b.op("Gelu", linear(b, x, f"{PROJECTOR}mlp.0", params, bias_required=True), approximate="none")
        y = linear(b, y, f"{PROJECTOR}mlp.2", params, bias_required=True)
    y = b.op("Reshape", y, b.const([-1, dims.text_hidden], "rows", "int64"))
    b.output(y, "image_features", params.dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _block(b: GraphBuilder, x: ir.Value, dims: UmtDims, params: Params, name: str) -> ir.Value:
    """A pre-norm block: fused qkv (bias q, 0, v), all-to-all attention, proj; fc1 -> exact GELU -> fc2."""
    d = dims.hidden
    h = layer_norm(b, x, f"{name}norm1", BLOCK_EPS, params)
    q_bias, v_bias = f"{name}attn.q_bias", f"{name}attn.v_bias"
    bias = params.computed((3 * d,), lambda: np.concatenate([params.store.read(q_bias), np.zeros(d, np.float32),
                                                              params.store.read(v_bias)]))  # fmt: skip
    qkv = linear(b, h, f"{name}attn.qkv", params)
    qkv = b.op("Add", qkv, b.initializer(f"{name}attn.qkv.bias", bias))
    q, k, v = b.op_multi("Split", qkv, b.const([d] * 3, "thirds", "int64"), axis=-1, outputs=3)
    heads = dims.heads
    out = b.op("Attention", q, k, v, q_num_heads=heads, kv_num_heads=heads, scale=(d // heads) ** -0.5)
    x = b.op("Add", x, linear(b, out, f"{name}attn.proj", params, bias_required=True), name="attn_residual")
    h = linear(b, layer_norm(b, x, f"{name}norm2", BLOCK_EPS, params), f"{name}mlp.fc1", params, bias_required=True)
    h = b.op("Gelu", h, approximate="none")
    return b.op("Add", x, linear(b, h, f"{name}mlp.fc2", params, bias_required=True), name="mlp_residual")


def _every_other(b: GraphBuilder, x: ir.Value, start: int) -> ir.Value:
    """x[:, start::2] (tokens on axis 1)."""
    c = b.const
    return b.op("Slice", x, c([start], f"from{start}", "int64"), c([2**62], "to_end", "int64"), c([1], "ax1", "int64"),
                c([2], "step2", "int64"))  # fmt: skip


def _rows(b: GraphBuilder, data: ir.Value, index: ir.Value) -> ir.Value:
    """data[n, index[n, j], :] for every channel: GatherElements over axis 1 with the index broadcast."""
    return b.op("GatherElements", data, _broadcast(b, index, data), axis=1)


def _broadcast(b: GraphBuilder, index: ir.Value, like: ir.Value) -> ir.Value:
    """[N, k] token index -> [N, k, channels of `like`]."""
    shape = b.op("Concat", b.op("Shape", index), b.op("Shape", like, start=2), axis=0)
    return b.op("Expand", b.op("Unsqueeze", index, b.const([2], "ax2", "int64")), shape)


def _merge_round(
    b: GraphBuilder, x: ir.Value, size: ir.Value | None, r: int, dims: UmtDims, dtype: ir.DataType
) -> tuple[ir.Value, ir.Value]:
    """One ToMe round over x [N, p, d] with token sizes [N, p, 1] (None: all 1): p - r tokens out."""
    c = b.const
    heads = c([0, 0, dims.heads, dims.hidden // dims.heads], "head_split", "int64")
    metric = b.op("ReduceMean", b.op("Reshape", x, heads), c([2], "heads_axis", "int64"), keepdims=0)
    metric = b.op("Div", metric, b.op("ReduceL2", metric, c([-1], "last", "int64"), keepdims=1))
    scores = b.op("MatMul", _every_other(b, metric, 0), b.op("Transpose", _every_other(b, metric, 1), perm=[0, 2, 1]))
    best = b.op("ReduceMax", scores, c([-1], "last", "int64"), keepdims=0)  # [N, a]
    partner = b.op("ArgMax", scores, axis=-1, keepdims=0)  # [N, a]
    a_count = b.op("Shape", best, start=1, end=2)
    _, order = b.op_multi("TopK", best, a_count, axis=-1, largest=BEST_FIRST, sorted=1, outputs=2)
    r_at = c([r], "r", "int64")
    merged = b.op("Slice", order, c([0], "zero", "int64"), r_at, c([1], "ax1", "int64"))
    kept = b.op("Slice", order, r_at, c([2**62], "to_end", "int64"), c([1], "ax1", "int64"))
    into = b.op("GatherElements", partner, merged, axis=1)
    if size is None:
        ones = b.op("Concat", b.op("Shape", x, end=2), c([1], "one", "int64"), axis=0)
        size = b.op("Expand", c(np.ones((1, 1, 1), NUMPY_DTYPES[dtype]), "ones"), ones)
    weighted = b.op("Concat", b.op("Mul", x, size), size, axis=-1)
    if dtype != F32:  # onnxruntime's CPU ScatterElements adds float32 only: the sums are taken in float32
        weighted = b.op("Cast", weighted, to=F32)
    a, dst = _every_other(b, weighted, 0), _every_other(b, weighted, 1)
    dst = b.op("ScatterElements", dst, _broadcast(b, into, dst), _rows(b, a, merged), axis=1, reduction="add")
    out = b.op("Concat", _rows(b, a, kept), dst, axis=1)
    out = out if dtype == F32 else b.op("Cast", out, to=dtype)
    total, summed = b.op_multi("Split", out, c([dims.hidden, 1], "value_size", "int64"), axis=-1, outputs=2)
    return b.op("Div", total, summed), summed
