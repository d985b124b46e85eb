"""What VideoChat-Flash's two video towers share (docs/coverage.md §36): the dims the image graph reads, and the
patch embedding of a one-frame tubelet. UMT (graph/encoders/umt.py) and InternVideo2 (graph/encoders/internvideo2.py)
both embed a clip by a Conv3d whose kernel and stride are (1, p, p); on an image (a one-frame clip) that is a Conv2d
of the kernel's only frame."""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

IMAGE_TOKENS = 64  # ToMe16_mlp_hd64's count for an image (compress=False)
TOWER_HEADS = 16  # both towers' builders fix 16 heads, whatever the width (and the projector's metric reads 16)


@dataclass(frozen=True)
class VideoTowerDims:
    """What the image graph reads: which tower (`umt` / `internvideo2`) under which tensor prefix, its width, patch
    and depth from its tensors, the frame size (fixed by the remote code per tower name), the decoder's width."""

    tower: str
    prefix: str  # the tower's tensors' prefix in the release
    hidden: int
    layers: int  # the blocks run: blocks_run's count
    image: int  # S
    patch: int
    text_hidden: int
    tokens: int = IMAGE_TOKENS
    heads: int = TOWER_HEADS

    @property
    def grid(self) -> int:
        return self.image // self.patch

    def merges(self) -> list[int]:
        """The tokens each ToMe round removes (the remote code's merge_tokens schedule: at most half a round)."""
        left, out = self.grid * self.grid, []
        while left != self.tokens:
            r = left - self.tokens if left - self.tokens <= left // 2 else left // 2
            out.append(r)
            left -= r
        return out


def tubelet_patches(b: GraphBuilder, images: ir.Value, dims: VideoTowerDims, params: Params) -> ir.Value:
    """[N, 3, S, S] -> [N, grid², hidden]: the biased one-frame tubelet Conv3d as a Conv2d, rows in raster order."""
    d, weight, bias = dims.hidden, f"{dims.prefix}patch_embed.proj.weight", f"{dims.prefix}patch_embed.proj.bias"
    w = params.computed((d, 3, dims.patch, dims.patch), lambda: params.store.read(weight)[:, :, 0])
    x = b.op("Conv", images, b.initializer(weight, w), b.initializer(bias, params.tensor(bias)),
             kernel_shape=[dims.patch] * 2, strides=[dims.patch] * 2)  # fmt: skip
    return b.op("Transpose", b.op("Reshape", x, b.const([0, d, -1], "grid_flat", "int64")), perm=[0, 2, 1])


def one_frame_kernel(conv: tuple[int, ...] | list[int]) -> bool:
    """A stored patch_embed.proj.weight that is a one-frame tubelet kernel [d, 3, 1, p, p] of square patches."""
    return len(conv) == 5 and int(conv[1]) == 3 and int(conv[2]) == 1 and int(conv[3]) == int(conv[4])


def blocks_run(store: WeightStore, prefix: str, depth: int, select: int | None) -> int:
    """How many of the stored blocks run: the remote code builds the first `depth` + `mm_vision_select_layer` + 1
    (depth: the tower's full 24 or 40) and loads the checkpoint into them, ignoring blocks past those; a checkpoint
    that stores fewer (a shrunk tower) runs all it stores. No `mm_vision_select_layer`: every stored block."""
    stored = sum(1 for n in store.names() if n.startswith(f"{prefix}blocks.") and n.endswith(".norm1.weight"))
    built = stored if select is None else depth + int(select) + 1
    if built < 1:
        raise InputError(f"VideoChat-Flash mm_vision_select_layer {select} keeps none of the tower's {depth} blocks; "
                         "use --text-only")  # fmt: skip
    return min(stored, built)
