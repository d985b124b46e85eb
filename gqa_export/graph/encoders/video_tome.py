"""VideoChat-Flash's image side as an onnx-ir graph: its video tower on single images (UMT-L or InternVideo2-1B, as
`mm_vision_tower` names it), the tokens merged by bipartite soft matching (ToMe) down to a fixed count, and the
2-layer MLP projector (docs/coverage.md §36).

Input is what onnxruntime-genai's videochat_flash_qwen processor writes: `pixel_values [1, N, 3, S, S]` float32, the
prompt's N images (each resized to S x S, rescaled, normalized). Out: `image_features [N·K, text hidden]`, each
image's K merged tokens in turn (K = 64: the remote code's image path, `compress=False`).

- the tower: graph/encoders/umt.py or graph/encoders/internvideo2.py, [N, grid², tower width] out;
- the merge (`model.mm_projector.`): graph/encoders/tome.py's rounds until K tokens are left;
- `mlp`: Linear, exact GELU, Linear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders import tome
from gqa_export.graph.encoders.encoder_ops import linear
from gqa_export.graph.encoders.internvideo2 import internvideo2_dims, internvideo2_stage
from gqa_export.graph.encoders.tubelet_vit import IMAGE_TOKENS, VideoTowerDims
from gqa_export.graph.encoders.umt import umt_dims, umt_stage
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 24}  # Attention-24
N, T = "num_images", "num_image_tokens"
F32 = ir.DataType.FLOAT
PROJECTOR = "model.mm_projector."
# the tower stage per VideoTowerDims.tower: [N, 3, S, S] -> [N, grid², tower width]
STAGES: dict[str, Callable[[GraphBuilder, ir.Value, VideoTowerDims, Params], ir.Value]] = {
    "umt": umt_stage,
    "internvideo2": internvideo2_stage,
}


def videochat_vision_dims(hf_config: Any, text_hidden: int, store: WeightStore) -> VideoTowerDims:
    """The tower's dims from the release's `mm_*` keys and its tensors, or InputError naming what genai's
    videochat_flash_qwen package cannot run. The tower is picked by name as the remote code's build_vision_tower
    does: `internvideo2` first, then `umt` (`umt-hd`: 448-pixel frames)."""
    tower = str(getattr(hf_config, "mm_vision_tower", ""))
    projector = getattr(hf_config, "mm_projector_type", None)
    if projector != "tome16_mlp_hd64" or not any(name in tower for name in STAGES):
        raise InputError(
            f"VideoChat-Flash mm_vision_tower {tower!r} / mm_projector_type {projector!r}: only the UMT and "
            "InternVideo2 towers with the tome16_mlp_hd64 projector are exported; use --text-only"
        )
    if getattr(hf_config, "mm_llm_compress", False):
        raise InputError("VideoChat-Flash mm_llm_compress drops image tokens inside the decoder's layers at prefill "
                         "(a per-layer cache genai does not keep): set it false, or use --text-only")  # fmt: skip
    if "unpad" in str(getattr(hf_config, "mm_patch_merge_type", "")):
        raise InputError("VideoChat-Flash mm_patch_merge_type with unpad (an image_newline row) is not exported; "
                         "use --text-only")  # fmt: skip
    select = getattr(hf_config, "mm_vision_select_layer", None)
    if "internvideo2" in tower:
        dims = internvideo2_dims(select, text_hidden, store)
    else:
        dims = umt_dims(tower, select, text_hidden, store)
    if dims.grid**2 <= IMAGE_TOKENS:
        raise InputError(f"a {dims.grid} x {dims.grid} patch grid cannot merge to {IMAGE_TOKENS} tokens")
    return dims


def build_video_tome(dims: VideoTowerDims, params: Params) -> ir.Model:
    """The vision graph, weights streamed from `params`."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    s = dims.image
    pixels = b.input("pixel_values", F32, [1, N, 3, s, s])
    x = b.op("Reshape", pixels, b.const([-1, 3, s, s], "images", "int64"))
    x = x if params.dtype == F32 else b.op("Cast", x, to=params.dtype)
    x = STAGES[dims.tower](b, x, dims, params)
    size = None
    for i, r in enumerate(dims.merges()):
        with b.scope(f"tome.{i}"):
            x, size = tome.merge_round(b, x, size, r, dims, params.dtype)
    with b.scope("mlp"):
        y = b.op("Gelu", linear(b, x, f"{PROJECTOR}mlp.0", params, bias_required=True), approximate="none")
        y = linear(b, y, f"{PROJECTOR}mlp.2", params, bias_required=True)
    y = b.op("Reshape", y, b.const([-1, dims.text_hidden], "rows", "int64"))
    b.output(y, "image_features", params.dtype, [T, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)
