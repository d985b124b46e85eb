"""A conformer audio encoder (Universal-Speech-Model style) and its projection into the text
model's width: log-mel frames -> audio soft tokens (docs/multimodal.md §16).

Inputs are what onnxruntime-genai's Gemma-4 speech path feeds: `audio_embeds [B, T, mel]`
float32 (the Gemma4LogMel features) and `input_features_mask [B, T]` bool (valid frames). The
graph:

- subsampling: two `Conv2d(3 x 3, stride 2, pad 1)` over (time, mel), each input multiplied by
  the frame mask (every other frame kept for the second), each followed by a bias-free LayerNorm
  over channels and ReLU; the (mel, channel) grid of a frame flattened and a bias-free Linear;
- conformer layers: ½-residual feed-forward (clamp, RMSNorm, Linear x4, SiLU, Linear, clamp,
  RMSNorm), chunked local attention with a relative-position term (chunked_attention.py) between
  RMSNorms, a light convolution (RMSNorm, Linear x2, GLU, causal depthwise Conv1d, clamp, RMSNorm,
  SiLU, Linear, residual), a second feed-forward, clamp, RMSNorm;
- `output_proj` (with bias), then the embedder: RMSNorm without weight and one bias-free matrix
  to the text width;
- the rows of frames the (twice subsampled) mask marks invalid are dropped, as HF drops them:
  `audio_features [valid tokens, text width]`, rank 2 as genai allocates it (probed, §16.3).

Clipped linears clamp each projection's input and output with the stored bounds; the clamps of
`gradient_clipping` are kept as HF writes them. The graph computes in float32 and casts its
output to the activation dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.encoders.chunked_attention import (
    ChunkShape,
    block_indices,
    chunked_attention,
    key_mask,
    relative_table,
)
from gqa_export.graph.encoders.clipped_linear import clipped_linear
from gqa_export.graph.encoders.encoder_ops import linear, matmul, rms_norm, silu, vector
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 21}
B, T, TOKENS = "batch_size", "num_frames", "num_audio_tokens"
F32, I64 = ir.DataType.FLOAT, "int64"
ACTIVATIONS = ("silu", "swish")


@dataclass(frozen=True)
class ConformerDims:
    """What the graph needs from the audio config and the feature extractor."""

    attention: ChunkShape
    layers: int
    mel: int  # feature_size of the log-mel features
    channels: tuple[int, int]  # subsampling_conv_channels
    conv_kernel: int
    eps: float  # rms_norm_eps (subsampling LayerNorms, light-conv norms, the embedder)
    residual_weight: float
    clip: float  # gradient_clipping (clamped to the float32 range)
    clipped: bool  # use_clipped_linears
    text_hidden: int
    tower: str  # prefix of `subsample_conv_projection.input_proj_linear.weight`
    projector: str  # prefix of `embed_audio.embedding_projection.weight`


def conformer_dims(hf_config: Any, text_hidden: int, store: WeightStore, mel: int) -> ConformerDims:
    """The encoder's dimensions, or InputError naming what this graph cannot compute."""
    audio = hf_config.audio_config
    act = str(getattr(audio, "hidden_act", "silu"))
    if act not in ACTIVATIONS:
        raise InputError(f"audio tower activation '{act}' is not supported; export with --text-only")
    channels = tuple(int(c) for c in audio.subsampling_conv_channels)
    if len(channels) != 2:
        raise InputError(
            f"audio subsampling with {len(channels)} convolutions is not supported; export with --text-only"
        )
    hidden, heads = int(audio.hidden_size), int(audio.num_attention_heads)
    tower = tensor_prefix(store, "subsample_conv_projection.input_proj_linear.weight")
    rows = ((mel + 1) // 2 + 1) // 2  # mel bins after two stride-2, pad-1, kernel-3 convolutions
    proj_in = store.info(f"{tower}subsample_conv_projection.input_proj_linear.weight").shape[1]
    if rows * channels[1] != proj_in:
        raise InputError(
            f"the feature extractor's feature_size {mel} gives {rows * channels[1]} subsampled features per frame, "
            f"the audio tower's input projection takes {proj_in}: fix the feature extractor config, or --text-only"
        )
    shape = ChunkShape(
        chunk=int(audio.attention_chunk_size),
        past=int(audio.attention_context_left) - 1,
        future=int(audio.attention_context_right),
        heads=heads,
        head_dim=hidden // heads,
        hidden=hidden,
        logit_cap=float(audio.attention_logit_cap),
        invalid=float(audio.attention_invalid_logits_value),
    )
    return ConformerDims(
        attention=shape,
        layers=int(audio.num_hidden_layers),
        mel=mel,
        channels=(channels[0], channels[1]),
        conv_kernel=int(audio.conv_kernel_size),
        eps=float(audio.rms_norm_eps),
        residual_weight=float(audio.residual_weight),
        clip=min(float(audio.gradient_clipping), float(np.finfo(np.float32).max)),
        clipped=bool(getattr(audio, "use_clipped_linears", False)),
        text_hidden=text_hidden,
        tower=tower,
        projector=tensor_prefix(store, "embed_audio.embedding_projection.weight"),
    )


def build_conformer(dims: ConformerDims, params: Params) -> ir.Model:
    """audio_embeds [B, T, mel] + input_features_mask [B, T] -> audio_features [tokens, text width]
    in the activation dtype of `params`."""
    out_dtype = params.dtype
    params = Params(params.store, F32)  # the tower computes in float32 whatever the decoder's dtype
    b = GraphBuilder("gqa_export_speech", OPSETS)
    t = dims.tower
    x = b.input("audio_embeds", F32, [B, T, dims.mel])
    valid = b.input("input_features_mask", ir.DataType.BOOL, [B, T])
    with b.scope("subsample_conv_projection"):
        x, valid = _subsample(b, x, valid, dims, params, f"{t}subsample_conv_projection.")
    length = b.op("Shape", x, start=1, end=2)
    shape = dims.attention
    with b.scope("chunks"):
        blocks = b.op("Div", b.op("Add", length, b.const([shape.chunk - 1], "round_up", I64)),
                      b.const([shape.chunk], "chunk", I64))  # fmt: skip
        index = block_indices(b, b.op("Squeeze", blocks), shape)
        allowed = key_mask(b, valid, index, shape)
        table = b.const(relative_table(shape), "relative_positions")
    for i in range(dims.layers):
        with b.scope(f"layers.{i}"):
            x = _layer(b, x, (table, allowed, index, blocks, length), dims, params, f"{t}layers.{i}.")
    with b.scope("output_proj"):
        x = linear(b, x, f"{t}output_proj", params)
    with b.scope("embed_audio"):
        x = _rms(b, x, None, dims.eps)
        x = matmul(b, x, f"{dims.projector}embed_audio.embedding_projection.weight", params)
        rows = b.op("Reshape", x, b.const([-1, dims.text_hidden], "rows", I64))
        x = b.op("Compress", rows, b.op("Reshape", valid, b.const([-1], "flat", I64)), axis=0)
        x = x if out_dtype == F32 else b.op("Cast", x, to=out_dtype)
    b.output(x, "audio_features", out_dtype, [TOKENS, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _subsample(
    b: GraphBuilder, x: ir.Value, valid: ir.Value, dims: ConformerDims, params: Params, name: str
) -> tuple[ir.Value, ir.Value]:
    """Two masked stride-2 convolutions with LayerNorm + ReLU, then the frame projection:
    [B, T, mel] -> [B, T/4, hidden], and the mask of the kept frames."""
    h = b.op("Unsqueeze", x, b.const([1], "channel_axis", I64))  # [B, 1, T, mel]
    for i in range(2):
        layer = f"{name}layer{i}."
        with b.scope(f"layer{i}"):
            keep = b.op("Unsqueeze", b.op("Cast", valid, to=F32), b.const([1, 3], "mask_axes", I64))
            h = b.op("Mul", h, keep)
            weight = b.initializer(f"{layer}conv.weight", params.tensor(f"{layer}conv.weight"))
            h = b.op("Conv", h, weight, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            norm = vector(b, f"{layer}norm.weight", params)
            h = b.op("LayerNormalization", b.op("Transpose", h, perm=[0, 2, 3, 1]), norm, axis=-1, epsilon=dims.eps)
            h = b.op("Relu", h)  # [B, T', mel', C] channels last
            if i == 0:
                h = b.op("Transpose", h, perm=[0, 3, 1, 2])
            valid = b.op("Slice", valid, b.const([0], "start", I64), b.const([np.iinfo(np.int64).max], "end", I64),
                         b.const([1], "time_axis", I64), b.const([2], "every_other", I64))  # fmt: skip
    flat = b.op("Reshape", h, b.const([0, 0, -1], "frame_rows", I64))
    return matmul(b, flat, f"{name}input_proj_linear.weight", params), valid


def _layer(
    b: GraphBuilder, x: ir.Value, ctx: tuple[ir.Value, ...], dims: ConformerDims, params: Params, name: str
) -> ir.Value:
    """feed-forward, attention between norms, light convolution, feed-forward, norm."""
    x = _feed_forward(b, x, dims, params, f"{name}feed_forward1.")
    h = _rms(b, _clip(b, x, dims), f"{name}norm_pre_attn.weight", 1e-6, params)
    h = _attention(b, h, ctx, dims, params, f"{name}self_attn.")
    x = b.op("Add", x, _rms(b, _clip(b, h, dims), f"{name}norm_post_attn.weight", 1e-6, params))
    x = _light_conv(b, x, dims, params, f"{name}lconv1d.")
    x = _feed_forward(b, x, dims, params, f"{name}feed_forward2.")
    return typed(_rms(b, _clip(b, x, dims), f"{name}norm_out.weight", 1e-6, params), F32,
                 [B, "num_tokens", dims.attention.hidden])  # fmt: skip


def _feed_forward(b: GraphBuilder, x: ir.Value, dims: ConformerDims, params: Params, name: str) -> ir.Value:
    with b.scope(name.rstrip(".").rsplit(".", 1)[-1]):
        h = _rms(b, _clip(b, x, dims), f"{name}pre_layer_norm.weight", 1e-6, params)
        h = _linear(b, silu(b, _linear(b, h, f"{name}ffw_layer_1", dims, params)), f"{name}ffw_layer_2", dims,
                    params)  # fmt: skip
        h = _rms(b, _clip(b, h, dims), f"{name}post_layer_norm.weight", 1e-6, params)
        return b.op("Add", b.op("Mul", h, b.const(np.float32(dims.residual_weight), "residual_weight")), x)


def _attention(
    b: GraphBuilder, x: ir.Value, ctx: tuple[ir.Value, ...], dims: ConformerDims, params: Params, name: str
) -> ir.Value:
    """q, k, v (clipped linears, per-head), the query and key scales, chunked attention, `post`."""
    table, allowed, index, blocks, length = ctx
    shape = dims.attention
    heads = b.const([0, 0, shape.heads, shape.head_dim], "heads", I64)
    q, k, v = (
        b.op("Reshape", _linear(b, x, f"{name}{p}", dims, params), heads) for p in ("q_proj", "k_proj", "v_proj")
    )
    q_scale = np.float32((shape.head_dim**-0.5) / np.log(2))
    per_dim = f"{name}per_dim_scale"
    q = b.op("Mul", b.op("Mul", q, b.const(q_scale, "q_scale")),
             b.op("Softplus", b.initializer(per_dim, params.vector([per_dim]))))  # fmt: skip
    k = b.op("Mul", k, b.const(np.float32(np.log(1 + np.e) / np.log(2)), "k_scale"))
    relative = matmul(b, table, f"{name}relative_k_proj.weight", params)
    out = chunked_attention(b, q, k, v, relative, allowed, index, blocks, length, shape)
    return _linear(b, out, f"{name}post", dims, params)


def _light_conv(b: GraphBuilder, x: ir.Value, dims: ConformerDims, params: Params, name: str) -> ir.Value:
    """RMSNorm, Linear to 2x, GLU, causal depthwise Conv1d, clamp, RMSNorm, SiLU, Linear, residual."""
    with b.scope("lconv1d"):
        h = _linear(
            b, _rms(b, x, f"{name}pre_layer_norm.weight", dims.eps, params), f"{name}linear_start", dims, params
        )
        value, gate = b.op_multi("Split", h, axis=-1, num_outputs=2, outputs=2)
        h = b.op("Transpose", b.op("Mul", value, b.op("Sigmoid", gate)), perm=[0, 2, 1])  # [B, hidden, T]
        weight = b.initializer(f"{name}depthwise_conv1d.weight", params.tensor(f"{name}depthwise_conv1d.weight"))
        k = dims.conv_kernel
        h = b.op("Conv", h, weight, kernel_shape=[k], pads=[k - 1, 0], group=dims.attention.hidden)
        h = _rms(b, _clip(b, b.op("Transpose", h, perm=[0, 2, 1]), dims), f"{name}conv_norm.weight", dims.eps, params)
        return b.op("Add", _linear(b, silu(b, h), f"{name}linear_end", dims, params), x)


def _rms(b: GraphBuilder, x: ir.Value, weight: str | None, eps: float, params: Params | None = None) -> ir.Value:
    """x · (mean(x²) + eps)^-½ · w (none: no weight), over the last axis."""
    if weight is None or params is None:
        ms = b.op("ReduceMean", b.op("Mul", x, x), b.const([-1], "last", I64), keepdims=1)
        return b.op("Mul", x, b.op("Pow", b.op("Add", ms, b.const(np.float32(eps), "eps")),
                                   b.const(np.float32(-0.5), "minus_half")))  # fmt: skip
    return rms_norm(b, x, vector(b, weight, params), eps)


def _clip(b: GraphBuilder, x: ir.Value, dims: ConformerDims) -> ir.Value:
    """The encoder's gradient_clipping clamp (a no-op on ordinary values, kept as HF computes it)."""
    return b.op("Clip", x, b.const(np.float32(-dims.clip), "clip_low"), b.const(np.float32(dims.clip), "clip_high"))


def _linear(b: GraphBuilder, x: ir.Value, module: str, dims: ConformerDims, params: Params) -> ir.Value:
    return clipped_linear(b, x, module, dims.clipped, params)
