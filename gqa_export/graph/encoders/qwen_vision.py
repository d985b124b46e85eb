"""The Qwen-VL vision towers (Qwen2.5-VL's window-attention ViT; Qwen2-VL's, Qwen3.5's and
Qwen3-VL's full-attention ViTs) with their patch merger, as an onnx-ir graph.

`pixel_values [P, C·T·p·p]` (the processor's packed patches, docs/multimodal.md) and
`image_grid_thw [N, 3]` int64 in, `image_features [P / merge², out_hidden]` out, for any number of
images of any grid (docs/multimodal.md §11):

- patch embedding: the checkpoint's Conv3d with kernel = stride = (T, p, p) over one patch row is a
  MatMul with its weight flattened to [C·T·p·p, hidden];
- 2-D rotary embedding: a patch's (h, w) in its frame, each rotating a quarter of the head dim's
  frequencies (rotate-half over the whole head);
- attention restricted by an additive [P, P] bias: to the patch's image frame on the
  full-attention blocks, to its window as well elsewhere. HF reorders the patches window by window
  (whole merge blocks) before the blocks and restores the order after the merger; every op but
  attention is per patch, and attention under a segment mask is the same for any patch order, so
  the graph keeps the processor's order and needs neither permutation;
- RMSNorm + gated MLP blocks, then the merger: RMSNorm, each merge block's merge² consecutive rows
  as one row, Linear -> GELU -> Linear.

Qwen2-VL's tower is Qwen2.5-VL's without windows (no window_size: every block attends within its
frame), with LayerNorms (its norms and merger ln_q have biases) and an fc1 -> QuickGELU -> fc2 MLP.
The Qwen3 towers differ in mechanisms the checkpoint's tensors name, and the graph follows them:
a patch-embedding bias, a learned position table resampled to each grid
(graph/encoders/position_table.py, `pos_embed.weight`), LayerNorms (norms with a bias), a plain
fc1 -> act -> fc2 MLP (no gate_proj) and no windows (no window_size in the config). Qwen3-VL's
deepstack mergers (one per `deepstack_visual_indexes` block: the block's output merged, then
LayerNorm over the merged row, Linear -> GELU -> Linear) give k more feature sets for the
decoder's first k layers; they leave the graph as k more column blocks of `image_features`
([tokens, out_hidden·(1 + k)]): onnxruntime-genai 0.18's feature buffer is `decoder.hidden_size`
wide, and that width is the decoder's widened inputs_embeds (docs/multimodal.md §11.5).
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
from gqa_export.graph.encoders.encoder_ops import activation, cos_sin, linear, patch_attention
from gqa_export.graph.encoders.patch_grid import patch_grid, segment_bias
from gqa_export.graph.encoders.position_table import interpolated_positions
from gqa_export.graph.params import NUMPY_DTYPES, Params

OPSETS = {"": 21}
P, N = "num_patches", "num_images"
EPS = 1e-6  # the tower's RMSNorms are built with a fixed eps


@dataclass(frozen=True)
class QwenVisionDims:
    """The vision_config fields the graph reads."""

    hidden_size: int
    num_heads: int
    depth: int
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    window_size: int
    fullatt_block_indexes: tuple[int, ...]
    out_hidden_size: int
    rope_theta: float
    hidden_act: str

    @classmethod
    def from_config(cls, vision: dict[str, Any]) -> QwenVisionDims:
        """From config.json's `vision_config` (transformers 4.x and 5.x spellings). Qwen2-VL's
        names its width `embed_dim` and the merger's output `hidden_size` (no out_hidden_size)."""
        rope = vision.get("rope_parameters") or {}
        qwen2_vl = "embed_dim" in vision and "out_hidden_size" not in vision
        dims = cls(
            hidden_size=vision["embed_dim" if qwen2_vl else "hidden_size"],
            num_heads=vision["num_heads"],
            depth=vision["depth"],
            patch_size=vision.get("patch_size", 14),
            temporal_patch_size=vision.get("temporal_patch_size", 2),
            in_channels=vision.get("in_channels", vision.get("in_chans", 3)),
            spatial_merge_size=vision.get("spatial_merge_size", 2),
            window_size=vision.get("window_size", 0),
            fullatt_block_indexes=tuple(vision.get("fullatt_block_indexes", ())),
            out_hidden_size=vision["hidden_size" if qwen2_vl else "out_hidden_size"],
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            # the published Qwen2-VL configs name no hidden_act: its config class's default is QuickGELU
            hidden_act=vision.get("hidden_act", "quick_gelu" if qwen2_vl else "silu"),
        )
        if dims.hidden_act not in ACTIVATIONS:
            raise InputError(f"vision_config.hidden_act '{dims.hidden_act}' is not supported by the Qwen vision tower")
        if dims.window_size and dims.window_blocks < 1:
            raise InputError("vision_config.window_size is smaller than one merge block: not a Qwen2.5-VL window")
        return dims

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def window_blocks(self) -> int:
        """Window side in merge blocks; 0: no windowed attention (Qwen3 towers)."""
        return self.window_size // self.spatial_merge_size // self.patch_size


ACTIVATIONS = ("silu", "gelu", "gelu_pytorch_tanh", "quick_gelu")


def vision_prefix(names: list[str]) -> str:
    """`visual.` in the published Qwen2.5-VL checkpoints, `model.visual.` as transformers 5.x saves
    them (and Qwen3-VL / Qwen3.5 are published), none for a tower saved on its own."""
    for prefix in ("visual.", "model.visual.", ""):
        if f"{prefix}patch_embed.proj.weight" in names:
            return prefix
    raise InputError("the checkpoint has no visual.patch_embed.proj.weight: not a Qwen-VL vision tower")


@dataclass(frozen=True)
class QwenTower:
    """A checkpoint's Qwen tower: its dims and where its tensors live."""

    dims: QwenVisionDims
    prefix: str
    deepstack: tuple[int, ...] = ()  # the blocks whose output a deepstack merger reads, in merger order
    feature_slices: int = 0  # the feature sets past the main one the decoder adds (its widened inputs_embeds, §11.5)


def qwen_tower(hf_config: Any, text: Any, store: Any) -> QwenTower:
    """The tower of a Qwen-VL / Qwen3.5 checkpoint (a full package's plan, package/towers.py),
    or InputError: a merger width other than the decoder's, deepstack mergers that do not match
    `deepstack_visual_indexes` or feed more layers than the decoder has."""
    vision = hf_config.vision_config
    config = vision.to_dict() if hasattr(vision, "to_dict") else dict(vision)
    names = store.names()
    prefix = vision_prefix(names)
    dims = QwenVisionDims.from_config(config)
    if dims.out_hidden_size != text.hidden_size:
        raise InputError(
            f"vision out_hidden_size {dims.out_hidden_size} differs from the decoder's hidden_size "
            f"{text.hidden_size}: export with --text-only"
        )
    deepstack = tuple(int(i) for i in config.get("deepstack_visual_indexes") or ())
    mergers = {n.split(".")[0] for n in (n[len(f"{prefix}deepstack_merger_list.") :] for n in names
                                         if n.startswith(f"{prefix}deepstack_merger_list."))}  # fmt: skip
    if mergers != {str(j) for j in range(len(deepstack))}:
        raise InputError(
            f"the checkpoint has {len(mergers)} deepstack mergers for deepstack_visual_indexes {list(deepstack)}: "
            "fix config.json, or export with --text-only"
        )
    # HF: an index past the tower never fires (the config class's default (8, 16, 24) under a shallower
    # tower), and the decoder adds only the sets its layers reach
    sets = min(len(fired_blocks(dims.depth, deepstack)), text.num_layers)
    return QwenTower(dims, prefix, deepstack, sets)


def fired_blocks(depth: int, deepstack: tuple[int, ...], sets: int | None = None) -> list[int]:
    """The tower blocks whose deepstack merger HF runs, in block order (the order of its feature
    sets, each added after one decoder layer): each listed block of the tower once (a block listed
    twice feeds its first merger once), the first `sets` of them (None: all)."""
    return [i for i in range(depth) if i in deepstack][:sets]


def build_qwen_tower(tower: QwenTower, params: Params) -> ir.Model:
    """The vision graph of a planned tower (the Qwen rows' builder, package/towers.py)."""
    return build_qwen_vision(tower.dims, params, tower.prefix, tower.deepstack, tower.feature_slices)


def build_qwen_vision(
    dims: QwenVisionDims, params: Params, prefix: str, deepstack: tuple[int, ...] = (), sets: int | None = None
) -> ir.Model:
    """The vision graph; weights stream from `params` under `prefix` (see vision_prefix). With
    `deepstack` blocks (in merger order), the features of the first `sets` deepstack mergers that
    run (fired_blocks; None: all) follow the main ones as column blocks."""
    b = GraphBuilder("gqa_export_vision", OPSETS)
    dtype = params.dtype
    t = _Tower(b, dims, params, prefix)
    pixels = b.input("pixel_values", ir.DataType.FLOAT, [P, dims.patch_dim])
    grid_thw = b.input("image_grid_thw", ir.DataType.INT64, [N, 3])
    x = pixels if dtype == ir.DataType.FLOAT else b.op("Cast", pixels, to=dtype)
    grid = patch_grid(b, pixels, grid_thw, dims.spatial_merge_size, dims.window_blocks)
    with b.scope("patch_embed"):
        weight = params.derived(
            f"{prefix}patch_embed.proj.weight",
            lambda w: w.reshape(w.shape[0], -1).T,
            (dims.patch_dim, dims.hidden_size),
        )
        x = b.op("MatMul", x, t.weight("patch_embed.proj.weight", weight))
        if t.has("patch_embed.proj.bias"):
            x = b.op("Add", x, t.weight("patch_embed.proj.bias", params.vector([f"{prefix}patch_embed.proj.bias"])))
    if t.has("pos_embed.weight"):
        table = params.matrix(f"{prefix}pos_embed.weight")
        side = math.isqrt(table.shape[0])  # HF: int(num_position_embeddings ** 0.5)
        x = b.op("Add", x, interpolated_positions(b, t.weight("pos_embed.weight", table), side, grid, dtype))
    x = typed(x, dtype, [P, dims.hidden_size])
    cos, sin = t.rotary(grid.h, grid.w)
    full = segment_bias(b, grid.frame_key, dtype, "frame_mask")
    windowed = segment_bias(b, grid.window_key, dtype, "window_mask") if dims.window_blocks else full
    unit = dims.hidden_size * dims.spatial_merge_size**2
    fired = fired_blocks(dims.depth, deepstack, sets)
    stacked: list[ir.Value] = []
    for i in range(dims.depth):
        with b.scope(f"blocks.{i}"):
            bias = full if i in dims.fullatt_block_indexes else windowed
            x = t.block(i, x, cos, sin, bias)
        if i in fired:  # HF's merger with use_postshuffle_norm: the norm over the merged row
            module = f"deepstack_merger_list.{deepstack.index(i)}"
            with b.scope(module):
                y = t.norm(b.op("Reshape", x, b.const([-1, unit], "merge_rows", "int64")), f"{module}.norm")
                y = b.op("Gelu", t.linear(y, f"{module}.linear_fc1"))
                stacked.append(t.linear(y, f"{module}.linear_fc2"))
    with b.scope("merger"):
        names = ("ln_q", "mlp.0", "mlp.2") if t.has("merger.ln_q.weight") else ("norm", "linear_fc1", "linear_fc2")
        y = t.norm(x, f"merger.{names[0]}")
        y = b.op("Reshape", y, b.const([-1, unit], "merge_rows", "int64"))
        y = b.op("Gelu", t.linear(y, f"merger.{names[1]}"))
        y = t.linear(y, f"merger.{names[2]}")
    if stacked:  # one feature row per image token: the main features, then each deepstack set (§11.5)
        y = b.op("Concat", y, *stacked, axis=-1, name="feature_sets")
    b.output(y, "image_features", dtype, ["num_image_tokens", dims.out_hidden_size * (1 + len(stacked))])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


class _Tower:
    """Blocks of one tower: weights by module name under the checkpoint prefix."""

    def __init__(self, b: GraphBuilder, dims: QwenVisionDims, params: Params, prefix: str) -> None:
        self.b, self.dims, self.params, self.prefix = b, dims, params, prefix
        self.np_dtype = NUMPY_DTYPES[params.dtype]

    def weight(self, module: str, tensor: ir.TensorProtocol) -> ir.Value:
        return self.b.initializer(self.prefix + module, tensor)

    def has(self, name: str) -> bool:
        return self.prefix + name in self.params.store

    def linear(self, x: ir.Value, module: str) -> ir.Value:
        """The Linear under the checkpoint prefix, its MatMul named by the module alone."""
        return linear(self.b, x, f"{self.prefix}{module}", self.params, matmul_name=f"{module}/MatMul")

    def norm(self, x: ir.Value, module: str) -> ir.Value:
        """LayerNorm where the checkpoint has its bias, else RMSNorm: weight * x / sqrt(mean(x²) + eps),
        in the graph's dtype (HF's in float32: the same at fp32)."""
        b = self.b
        name = f"{self.prefix}{module}.weight"
        w = b.initializer(name, self.params.vector([name]))
        if self.has(f"{module}.bias"):
            bias = b.initializer(f"{self.prefix}{module}.bias", self.params.vector([f"{self.prefix}{module}.bias"]))
            return b.op("LayerNormalization", x, w, bias, axis=-1, epsilon=EPS, name=f"{module}/LayerNorm")
        mean = b.op("ReduceMean", b.op("Mul", x, x), b.const([-1], "last", "int64"), keepdims=1)
        eps = b.const(np.array(EPS, self.np_dtype), "eps")
        return b.op("Mul", b.op("Div", x, b.op("Sqrt", b.op("Add", mean, eps))), w, name=f"{module}/scale")

    def rotary(self, pos_h: ir.Value, pos_w: ir.Value) -> tuple[ir.Value, ir.Value]:
        """cos/sin [P, 1, head_dim]: angles h·f | w·f, f = theta^(-4i / head_dim), repeated twice."""
        b, dims = self.b, self.dims
        quarter = dims.head_dim // 4
        inv = 1.0 / (dims.rope_theta ** (np.arange(0, 2 * quarter, 2, dtype=np.float32) / (2 * quarter)))
        with b.scope("rotary"):
            freq = b.const(inv.astype(np.float32), "inv_freq")
            col = b.const([1], "col", "int64")
            ang = [
                b.op("Mul", b.op("Unsqueeze", b.op("Cast", p, to=ir.DataType.FLOAT), col), freq) for p in (pos_h, pos_w)
            ]
            half = b.op("Concat", *ang, axis=-1)
            angles = b.op("Unsqueeze", b.op("Concat", half, half, axis=-1), col)  # [P, 1, head_dim]
            return cos_sin(b, angles, self.params.dtype)

    def block(self, i: int, x: ir.Value, cos: ir.Value, sin: ir.Value, bias: ir.Value) -> ir.Value:
        b, dims = self.b, self.dims
        module = f"blocks.{i}"
        hidden = [P, dims.hidden_size]
        y = self.attention(self.norm(x, f"{module}.norm1"), module, cos, sin, bias)
        x = typed(b.op("Add", x, y, name="attn_residual"), self.params.dtype, hidden)
        z = self.norm(x, f"{module}.norm2")
        if self.has(f"{module}.mlp.gate_proj.weight"):  # SwiGLU (Qwen2.5-VL)
            gate = self.activation(self.linear(z, f"{module}.mlp.gate_proj"))
            z = self.linear(b.op("Mul", gate, self.linear(z, f"{module}.mlp.up_proj")), f"{module}.mlp.down_proj")
        else:  # fc1 -> act -> fc2 (Qwen3 towers: linear_fc1/2; Qwen2-VL: fc1/2 with QuickGELU)
            fc = "fc" if self.has(f"{module}.mlp.fc1.weight") else "linear_fc"
            z = self.linear(self.activation(self.linear(z, f"{module}.mlp.{fc}1")), f"{module}.mlp.{fc}2")
        return typed(b.op("Add", x, z, name="mlp_residual"), self.params.dtype, hidden)

    def activation(self, x: ir.Value) -> ir.Value:
        return activation(self.b, x, self.dims.hidden_act, self.params.dtype)

    def attention(self, x: ir.Value, module: str, cos: ir.Value, sin: ir.Value, bias: ir.Value) -> ir.Value:
        """Bidirectional multi-head attention of every patch over the patches `bias` lets it see."""
        b, dims = self.b, self.dims
        heads, hd = dims.num_heads, dims.head_dim
        with b.scope("attn"):
            qkv = b.op("Reshape", self.linear(x, f"{module}.attn.qkv"), b.const([0, 3, heads, hd], "qkv", "int64"))
            q, k, v = (
                b.op("Squeeze", part, b.const([1], "one", "int64"))
                for part in b.op_multi("Split", qkv, axis=1, num_outputs=3, outputs=3)
            )
            out = patch_attention(b, (q, k, v), (cos, sin), bias, hd, self.params.dtype)
            return self.linear(out, f"{module}.attn.proj")
