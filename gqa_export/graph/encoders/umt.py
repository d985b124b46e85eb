"""UMT-L, VideoChat-Flash's `umt` video tower, on single images (docs/coverage.md §36): tensors under
`model.vision_tower.vision_tower.encoder.`.

The one-frame tubelet patches (graph/encoders/tubelet_vit.py), the fixed sine-cosine table of one frame added (the
remote code's `img_pos_embed`; for S != 224 the 14 x 14 table resized bicubically to the grid, as its
`get_sinusoid_encoding_table2`), pre-norm blocks (LayerNorm eps 1e-6, 16-head attention whose q and v have biases
and k none, exact-GELU MLP), the first 24 + `mm_vision_select_layer` + 1 blocks (as many as the remote code builds
and runs), then `vision_layernorm` (eps 1e-12). Frames are 448 pixels for a tower named
`umt-hd*`, else 224."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.encoder_ops import layer_norm, linear
from gqa_export.graph.encoders.tubelet_vit import (
    TOWER_HEADS,
    VideoTowerDims,
    blocks_run,
    one_frame_kernel,
    tubelet_patches,
)
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

PREFIX = "model.vision_tower.vision_tower.encoder."
BLOCK_EPS, FINAL_EPS = 1e-6, 1e-12  # the blocks' LayerNorms, vision_layernorm
TABLE_GRID = 14  # the checkpoint's sine-cosine grid (224-pixel frames of 16-pixel patches)
DEPTH = 24  # UMT-L's blocks (the remote code's UMTVisionConfig), before mm_vision_select_layer trims them


def umt_dims(tower: str, select: int | None, text_hidden: int, store: WeightStore) -> VideoTowerDims:
    """The tower's dims from its tensors (the blocks: those `select`, mm_vision_select_layer, keeps), the frame size
    from its name."""
    conv = store.info(f"{PREFIX}patch_embed.proj.weight").shape  # [d, 3, 1, p, p]
    hidden, patch = int(conv[0]), int(conv[-1])
    layers = blocks_run(store, PREFIX, DEPTH, select)
    image = 448 if "umt-hd" in tower else 224
    if not one_frame_kernel(conv) or hidden % TOWER_HEADS or image % patch or not layers:
        raise InputError(f"UMT tower of width {hidden}, kernel {list(conv)}, {layers} blocks: "
                         "not the remote code's one-frame-tubelet ViT; use --text-only")  # fmt: skip
    return VideoTowerDims("umt", PREFIX, hidden, layers, image, patch, text_hidden)


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


def position_table(dims: VideoTowerDims) -> np.ndarray:
    """[grid², width]: one frame's sine-cosine table, the checkpoint's 14 x 14 grid resized to the frame's."""
    table = sinusoid_table(TABLE_GRID * TABLE_GRID, dims.hidden)
    if dims.grid == TABLE_GRID:
        return table
    m = _bicubic_matrix(TABLE_GRID, dims.grid)
    grid = table.astype(np.float64).reshape(TABLE_GRID, TABLE_GRID, -1)
    return np.einsum("yi,xj,ijc->yxc", m, m, grid).reshape(dims.grid**2, -1).astype(np.float32)


def umt_stage(b: GraphBuilder, images: ir.Value, dims: VideoTowerDims, params: Params) -> ir.Value:
    """[N, 3, S, S] -> [N, grid², hidden]: patches, the frame's table, every block, vision_layernorm."""
    with b.scope("patch_embed"):
        x = tubelet_patches(b, images, dims, params)
        x = b.op("Add", x, b.initializer("img_pos_embed", params.table(position_table(dims))))
    for i in range(dims.layers):
        with b.scope(f"blocks.{i}"):
            x = _block(b, x, dims, params, f"{PREFIX}blocks.{i}.")
    return layer_norm(b, x, f"{PREFIX}vision_layernorm", FINAL_EPS, params)


def _block(b: GraphBuilder, x: ir.Value, dims: VideoTowerDims, params: Params, name: str) -> ir.Value:
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
