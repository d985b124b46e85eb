"""InternVideo2-1B, VideoChat-Flash's `internvideo2` video tower, on single images (docs/coverage.md §36): tensors
under `model.vision_tower.vision_tower.` (the remote code's PretrainVisionTransformer_clean).

On an image (a one-frame clip, `use_image`): the one-frame tubelet patches (graph/encoders/tubelet_vit.py), the
`cls_token` row put first, the stored `img_pos_embed` [1, 1 + grid², d] added (the image table, kept apart from the
clips' `pos_embed`), then the first 40 + `mm_vision_select_layer` + 1 blocks (as many as the remote code builds and
runs), and the cls row dropped; no final norm (`x_vis_only`). A block is pre-norm with RMSNorm (eps 1e-6):
qkv without bias, q and k each RMS-normalized over the whole width (all heads at once, not per head), 16-head
attention scaled by head_dim^-0.5, a biased proj, a LayerScale (`ls1`); then RMSNorm, fc1, exact GELU, fc2 and
`ls2`. The LayerScales multiply in float32 (the remote code forces them so; their weights start at 1e-5, below
fp16's normal range). Frames are 224 pixels (the remote code's builder fixes it for this tower)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.encoder_ops import linear, rms_norm, vector
from gqa_export.graph.encoders.tubelet_vit import (
    TOWER_HEADS,
    VideoTowerDims,
    blocks_run,
    one_frame_kernel,
    tubelet_patches,
)
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

PREFIX = "model.vision_tower.vision_tower."
IMAGE = 224  # the remote code's build_vision_tower passes image_size=224 for an internvideo2 tower
EPS = 1e-6  # every RMSNorm of the tower
DEPTH = 40  # InternVideo2-1B's blocks (the remote code's InternVideo2VisionConfig), before mm_vision_select_layer trims
F32 = ir.DataType.FLOAT


def internvideo2_dims(select: int | None, text_hidden: int, store: WeightStore) -> VideoTowerDims:
    """The tower's dims from its tensors (the blocks: those `select`, mm_vision_select_layer, keeps), or InputError
    naming the tensor that is not the remote code's."""
    conv = store.info(f"{PREFIX}patch_embed.proj.weight").shape  # [d, 3, 1, p, p]
    hidden, patch = int(conv[0]), int(conv[-1])
    layers = blocks_run(store, PREFIX, DEPTH, select)
    if not one_frame_kernel(conv) or hidden % TOWER_HEADS or IMAGE % patch or not layers:
        raise InputError(f"InternVideo2 tower of width {hidden}, kernel {list(conv)}, {layers} blocks: "
                         "not the remote code's one-frame-tubelet ViT; use --text-only")  # fmt: skip
    dims = VideoTowerDims("internvideo2", PREFIX, hidden, layers, IMAGE, patch, text_hidden)
    table = f"{PREFIX}img_pos_embed"
    if table not in store:
        raise InputError(f"InternVideo2 tower without {table} (the image position table its image path adds); "
                         "use --text-only")  # fmt: skip
    want, got = [1, dims.grid**2 + 1, hidden], list(store.info(table).shape)
    if got != want:
        raise InputError(f"InternVideo2 {table} is {got}, not {want} (a cls row and {dims.grid} x {dims.grid} "
                         f"patches of {IMAGE}-pixel frames); use --text-only")  # fmt: skip
    cls = f"{PREFIX}cls_token"
    if list(store.info(cls).shape) != [1, 1, hidden]:
        raise InputError(f"InternVideo2 {cls} is {list(store.info(cls).shape)}, not [1, 1, {hidden}]; use --text-only")
    return dims


def internvideo2_stage(b: GraphBuilder, images: ir.Value, dims: VideoTowerDims, params: Params) -> ir.Value:
    """[N, 3, S, S] -> [N, grid², hidden]: patches, cls row first, img_pos_embed, the blocks run, cls row dropped."""
    c = b.const
    with b.scope("patch_embed"):
        x = tubelet_patches(b, images, dims, params)
        cls = b.initializer(f"{PREFIX}cls_token", params.tensor(f"{PREFIX}cls_token"))
        rows = b.op("Concat", b.op("Shape", x, end=1), c([1, dims.hidden], "cls_rows", "int64"), axis=0)
        x = b.op("Concat", b.op("Expand", cls, rows), x, axis=1)
        x = b.op("Add", x, b.initializer(f"{PREFIX}img_pos_embed", params.tensor(f"{PREFIX}img_pos_embed")))
    for i in range(dims.layers):
        with b.scope(f"blocks.{i}"):
            x = _block(b, x, dims, params, f"{PREFIX}blocks.{i}.")
    return b.op("Slice", x, c([1], "after_cls", "int64"), c([2**62], "to_end", "int64"), c([1], "ax1", "int64"))


def _block(b: GraphBuilder, x: ir.Value, dims: VideoTowerDims, params: Params, name: str) -> ir.Value:
    """A pre-RMSNorm block: qkv, q and k normalized over the width, attention, proj, ls1; fc1 -> GELU -> fc2, ls2."""
    d = dims.hidden
    h = rms_norm(b, x, vector(b, f"{name}norm1.weight", params), EPS)
    q, k, v = b.op_multi("Split", linear(b, h, f"{name}attn.qkv", params), b.const([d] * 3, "thirds", "int64"),
                         axis=-1, outputs=3)  # fmt: skip
    q, k = (_qk_norm(b, t, f"{name}attn.{which}_norm.weight", params) for t, which in ((q, "q"), (k, "k")))
    heads = dims.heads
    out = b.op("Attention", q, k, v, q_num_heads=heads, kv_num_heads=heads, scale=(d // heads) ** -0.5)
    out = _layer_scale(b, linear(b, out, f"{name}attn.proj", params, bias_required=True), f"{name}ls1.weight", params)
    x = b.op("Add", x, out, name="attn_residual")
    h = rms_norm(b, x, vector(b, f"{name}norm2.weight", params), EPS)
    h = b.op("Gelu", linear(b, h, f"{name}mlp.fc1", params, bias_required=True), approximate="none")
    h = _layer_scale(b, linear(b, h, f"{name}mlp.fc2", params, bias_required=True), f"{name}ls2.weight", params)
    return b.op("Add", x, h, name="mlp_residual")


def _qk_norm(b: GraphBuilder, x: ir.Value, weight: str, params: Params) -> ir.Value:
    """q or k [N, P, d] RMS-normalized over all d channels (the remote code flattens the heads before its norm)."""
    return rms_norm(b, x, vector(b, weight, params), EPS)


def _layer_scale(b: GraphBuilder, x: ir.Value, weight: str, params: Params) -> ir.Value:
    """x · w in float32 (LayerScale with force_fp32), cast back to the activation dtype."""
    w = b.initializer(weight, Params(params.store, F32).vector([weight]))
    if params.dtype == F32:
        return b.op("Mul", x, w)
    return b.op("Cast", b.op("Mul", b.op("Cast", x, to=F32), w), to=params.dtype)
