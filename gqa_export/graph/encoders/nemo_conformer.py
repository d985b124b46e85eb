"""Phi-4-multimodal's speech encoder and projector (transformers' `Phi4MultimodalAudioEmbedding`):
log-mel frames -> the audio rows of the prompt, for onnxruntime-genai's phi4mm speech model
(docs/multimodal.md §20).

Inputs are what genai's phi4mm processor feeds: `audio_embeds [B, T, mel]` float32,
`audio_attention_mask [B, T]` bool, `audio_sizes [B]` int64 (audio tokens per clip) and
`audio_projection_mode [1]` int64 (2: speech, 3: vision + speech). The graph:

- mean / variance norm of the frames: `(x - global_mean) * global_invstd`;
- NeMo subsampling: `Conv2d(1 -> C, 3 x 3, stride 2, pad 1)`, activation, then per further
  halving a depthwise `Conv2d(3 x 3, stride 2)` and a pointwise `Conv2d(1 x 1)`, activation; each
  row's (channel, mel) grid flattened channel-major and a Linear: [B, T/r, hidden], no masking;
- windows of at most 500 rows, streaming-chunk key masks added as 1 / 0 and a clipped relative
  bias per head (conformer_windows.py);
- conformer layers: x + ½ FF(x) (LayerNorm, Linear to 2 x inner, up · act(gate), Linear), then
  + attention of its LayerNorm, + the conv module (LayerNorm, GLU pointwise conv with the `b1` /
  `b2` biases, causal depthwise conv, pointwise conv, activation, pointwise conv), + ½ FF, LayerNorm;
- the rows of each clip below `audio_sizes` kept, then the speech projector (`up_proj_for_speech`,
  exact GELU, `down_proj_for_speech`), or the vision-speech one when `audio_projection_mode` is 3
  (HF uses it exactly when the prompt has an image): `audio_features [tokens, text hidden]`.

Everything computes in float32; the output is cast to the activation dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.conformer_windows import Windows, WindowShape, unwindow, windows
from gqa_export.graph.encoders.encoder_ops import linear, silu, vector
from gqa_export.graph.encoders.tensor_prefix import tensor_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

OPSETS = {"": 21}
B, T, TOKENS = "batch_size", "num_frames", "num_audio_tokens"
F32 = ir.DataType.FLOAT
ACTIVATIONS = ("swish", "silu", "relu", "gelu")
VISION_SPEECH_MODE = 3  # genai's audio_projection_mode with an image in the prompt
EPS = 1e-5  # nn.LayerNorm's default: every norm of the tower
FEED_FORWARD_WEIGHT = 0.5  # each of the two feed-forwards adds half its output


@dataclass(frozen=True)
class NemoConformerDims:
    """What the graph needs from the audio config and the checkpoint."""

    window: WindowShape
    layers: int
    mel: int  # input_size
    halvings: int  # log2(time_reduction)
    heads: int
    hidden: int
    kernel: int  # the depthwise conv's kernel_size
    activation: str  # the feed-forward's
    conv_activation: str
    glu_activation: str  # conv_glu_type
    nemo_activation: str
    text_hidden: int
    encoder: str  # prefix of `encoder_embedding.` / `embed.` / `encoders.`
    projector: str  # prefix of `up_proj_for_speech.weight`
    input_norm: bool  # global_mean / global_invstd stored


def nemo_conformer_dims(hf_config: Any, text_hidden: int, store: WeightStore, mel: int) -> NemoConformerDims:
    """The encoder's dimensions, or InputError naming what this graph cannot compute; `mel` is the
    feature extractor's feature_size."""
    audio = hf_config.audio_config
    acts = {k: str(getattr(audio, k)) for k in ("activation", "conv_activation", "conv_glu_type", "nemo_activation")}
    for key, act in acts.items():
        if act not in ACTIVATIONS:
            raise InputError(f"audio {key} '{act}' is not supported; export with --text-only")
    hidden, reduction = int(audio.hidden_size), int(audio.time_reduction)
    if reduction < 2 or reduction & (reduction - 1):
        raise InputError(f"audio time_reduction {reduction} is not a power of 2; export with --text-only")
    checks = (
        (int(audio.downsample_rate) != 1, f"audio downsample_rate {audio.downsample_rate} (HF's projector takes 1)"),
        (bool(audio.bias_symmetric), "a symmetric relative attention bias (HF's lookup overflows at max distance)"),
        (int(audio.chunk_size) == 0, "audio chunk_size 0"),
        (int(audio.ext_pw_out_channel) != hidden or int(audio.depthwise_separable_out_channel) != hidden,
         "conv module channels other than hidden_size"),
        (int(audio.input_size) != mel, f"feature_size {mel} for an audio tower of input_size {audio.input_size}"),
    )  # fmt: skip
    for bad, what in checks:
        if bad:
            raise InputError(f"{what} is not supported; export with --text-only")
    encoder = tensor_prefix(store, "encoder.embed.out.weight") + "encoder."
    return NemoConformerDims(
        window=WindowShape(int(audio.chunk_size), int(audio.left_chunk), int(audio.bias_max_distance), reduction),
        layers=int(audio.num_blocks),
        mel=mel,
        halvings=int(math.log2(reduction)),
        heads=int(audio.num_attention_heads),
        hidden=hidden,
        kernel=int(audio.kernel_size),
        activation=acts["activation"],
        conv_activation=acts["conv_activation"],
        glu_activation=acts["conv_glu_type"],
        nemo_activation=acts["nemo_activation"],
        text_hidden=text_hidden,
        encoder=encoder,
        projector=encoder.removesuffix("encoder."),
        input_norm=f"{encoder}encoder_embedding.global_mean" in store,
    )


def build_nemo_conformer(dims: NemoConformerDims, params: Params) -> ir.Model:
    """The four genai speech inputs -> audio_features [tokens, text hidden] in the activation
    dtype of `params`."""
    out_dtype = params.dtype
    params = Params(params.store, F32)  # the tower computes in float32 whatever the decoder's dtype
    b = GraphBuilder("gqa_export_speech", OPSETS)
    e = dims.encoder
    x = b.input("audio_embeds", F32, [B, T, dims.mel])
    frame_mask = b.input("audio_attention_mask", ir.DataType.BOOL, [B, T])
    sizes = b.input("audio_sizes", ir.DataType.INT64, [B])
    mode = b.input("audio_projection_mode", ir.DataType.INT64, [1])
    if dims.input_norm:
        with b.scope("encoder_embedding"):
            mean, invstd = (f"{e}encoder_embedding.global_{n}" for n in ("mean", "invstd"))
            x = b.op("Mul", b.op("Sub", x, vector(b, mean, params)), vector(b, invstd, params))
    with b.scope("embed"):
        x = _subsample(b, x, dims, params, f"{e}embed.")
    with b.scope("windows"):
        h, w = windows(b, x, frame_mask, dims.window, f"{e}relative_attention_bias_layer.bias_values.weight", params)
    for i in range(dims.layers):
        with b.scope(f"encoders.{i}"):
            h = _layer(b, h, w, dims, params, f"{e}encoders.{i}.")
    with b.scope("rows"):
        x = unwindow(b, h, w)
        count = b.op("Shape", x, start=1, end=2)
        index = b.op("Range", b.const(0, "zero", np.int64), b.op("Squeeze", count), b.const(1, "one", np.int64))
        keep = b.op("Less", b.op("Unsqueeze", index, b.const([0], "batch_axis", np.int64)),
                    b.op("Unsqueeze", sizes, b.const([1], "time_axis", np.int64)))  # fmt: skip
        flat = b.op("Reshape", x, b.const([-1, dims.hidden], "rows", np.int64))
        x = b.op("Compress", flat, b.op("Reshape", keep, b.const([-1], "flat", np.int64)), axis=0)
    with b.scope("projection"):
        vision = b.op("Equal", mode, b.const([VISION_SPEECH_MODE], "vision_speech", np.int64))
        x = b.op("If", vision, then_branch=_projector(b, x, dims, params, "vision_speech"),
                 else_branch=_projector(b, x, dims, params, "speech"))  # fmt: skip
        x = x if out_dtype == F32 else b.op("Cast", x, to=out_dtype)
    b.output(x, "audio_features", out_dtype, [TOKENS, dims.text_hidden])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _projector(b: GraphBuilder, x: ir.Value, dims: NemoConformerDims, params: Params, kind: str) -> ir.Graph:
    """One branch of the projector choice: up_proj_for_<kind>, exact GELU, down_proj_for_<kind>,
    reading the outer graph's rows and weights."""
    sub = GraphBuilder(f"{kind}_projector", OPSETS)
    up, down = (f"{dims.projector}{p}_proj_for_{kind}" for p in ("up", "down"))
    weights = [b.initializer(f"{m}.{n}", _tensor(params, m, n)) for m in (up, down) for n in ("weight", "bias")]
    with sub.scope(f"projection_{kind}"):
        h = sub.op("Add", sub.op("MatMul", x, weights[0]), weights[1])
        h = sub.op("Add", sub.op("MatMul", sub.op("Gelu", h), weights[2]), weights[3])
    h.type, h.shape = ir.TensorType(F32), ir.Shape([TOKENS, dims.text_hidden])
    sub.graph.outputs.append(h)
    return sub.graph


def _tensor(params: Params, module: str, name: str) -> ir.TensorProtocol:
    full = f"{module}.{name}"
    return params.matmul_weight([full]) if name == "weight" else params.vector([full])


def _conv(b: GraphBuilder, x: ir.Value, module: str, params: Params, **attrs: Any) -> ir.Value:
    weight = b.initializer(f"{module}.weight", params.tensor(f"{module}.weight"))
    return b.op("Conv", x, weight, vector(b, f"{module}.bias", params), **attrs)


def _act(b: GraphBuilder, x: ir.Value, kind: str) -> ir.Value:
    if kind == "relu":
        return b.op("Relu", x)
    if kind == "gelu":
        return b.op("Gelu", x)
    return silu(b, x)  # swish / silu


def _norm(b: GraphBuilder, x: ir.Value, module: str, params: Params) -> ir.Value:
    weight, bias = (vector(b, f"{module}.{n}", params) for n in ("weight", "bias"))
    return b.op("LayerNormalization", x, weight, bias, axis=-1, epsilon=EPS)


def _subsample(b: GraphBuilder, x: ir.Value, dims: NemoConformerDims, params: Params, name: str) -> ir.Value:
    """[B, T, mel] -> [B, T / 2^halvings, hidden]: HF's Sequential of convolutions (indices 0, then
    2 + 3k depthwise and 3 + 3k pointwise) and the `out` Linear over the flattened (C, mel) grid."""
    halve = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    h = _act(b, _conv(b, b.op("Unsqueeze", x, b.const([1], "channel_axis", np.int64)), f"{name}conv.0", params,
                      **halve), dims.nemo_activation)  # fmt: skip
    channels = params.store.info(f"{name}conv.0.weight").shape[0]
    for k in range(dims.halvings - 1):
        h = _conv(b, h, f"{name}conv.{2 + 3 * k}", params, group=channels, **halve)
        h = _act(b, _conv(b, h, f"{name}conv.{3 + 3 * k}", params, kernel_shape=[1, 1]), dims.nemo_activation)
    rows = b.op("Reshape", b.op("Transpose", h, perm=[0, 2, 1, 3]), b.const([0, 0, -1], "frame_rows", np.int64))
    return linear(b, rows, f"{name}out", params, bias_required=True)


def _layer(b: GraphBuilder, x: ir.Value, w: Windows, dims: NemoConformerDims, params: Params, name: str) -> ir.Value:
    half = b.const(np.float32(FEED_FORWARD_WEIGHT), "half")
    x = b.op("Add", x, b.op("Mul", _feed_forward(b, x, dims, params, f"{name}feed_forward_in"), half))
    h = _attention(b, _norm(b, x, f"{name}layer_norm_att", params), w, dims, params, f"{name}self_attn.")
    x = b.op("Add", x, h)
    x = b.op("Add", x, _conv_module(b, x, dims, params, f"{name}conv."))
    x = b.op("Add", x, b.op("Mul", _feed_forward(b, x, dims, params, f"{name}feed_forward_out"), half))
    return _norm(b, x, f"{name}layer_norm", params)


def _feed_forward(b: GraphBuilder, x: ir.Value, dims: NemoConformerDims, params: Params, name: str) -> ir.Value:
    """LayerNorm, gate_up_proj, up · act(gate) (up first), down_proj."""
    with b.scope(name.rsplit(".", 1)[-1]):
        normed = _norm(b, x, f"{name}.layer_norm", params)
        up_gate = linear(b, normed, f"{name}.gate_up_proj", params, bias_required=True)
        up, gate = b.op_multi("Split", up_gate, axis=-1, num_outputs=2, outputs=2)
        activated = b.op("Mul", up, _act(b, gate, dims.activation))
        return linear(b, activated, f"{name}.down_proj", params, bias_required=True)


def _attention(
    b: GraphBuilder, x: ir.Value, w: Windows, dims: NemoConformerDims, params: Params, name: str
) -> ir.Value:
    """Multi-head attention over each window with the additive mask + relative bias."""
    with b.scope("self_attn"):
        heads = b.const([0, 0, dims.heads, dims.hidden // dims.heads], "heads", np.int64)
        q, k, v = (
            b.op(
                "Transpose",
                b.op("Reshape", linear(b, x, f"{name}{p}_proj", params, bias_required=True), heads),
                perm=[0, 2, 1, 3],
            )
            for p in ("q", "k", "v")
        )
        scale = b.const(np.float32((dims.hidden // dims.heads) ** -0.5), "scale")
        scores = b.op("Add", b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), scale), w.bias)
        out = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
        merged = b.op("Reshape", b.op("Transpose", out, perm=[0, 2, 1, 3]), b.const([0, 0, -1], "merged", np.int64))
        return linear(b, merged, f"{name}o_proj", params, bias_required=True)


def _conv_module(b: GraphBuilder, x: ir.Value, dims: NemoConformerDims, params: Params, name: str) -> ir.Value:
    """LayerNorm; GLU pointwise conv ((a + b1) · act(g + b2)); depthwise conv padded k - 1 on the
    left (HF pads both sides and cuts the last k - 1 outputs); pointwise conv; activation;
    pointwise conv. Channels first, [B, hidden, L], as HF runs it."""
    with b.scope("conv"):
        h = b.op("Transpose", _norm(b, x, f"{name}layer_norm", params), perm=[0, 2, 1])
        a, g = b.op_multi("Split", _conv(b, h, f"{name}glu.ext_pw_conv_1d", params, kernel_shape=[1]), axis=1,
                          num_outputs=2, outputs=2)  # fmt: skip
        b1, b2 = (b.initializer(f"{name}glu.{n}", params.tensor(f"{name}glu.{n}")) for n in ("b1", "b2"))
        h = b.op("Mul", b.op("Add", a, b1), _act(b, b.op("Add", g, b2), dims.glu_activation))
        k = dims.kernel
        h = _conv(b, h, f"{name}dw_sep_conv_1d.dw_conv", params, kernel_shape=[k], pads=[k - 1, 0], group=dims.hidden)
        h = _act(b, _conv(b, h, f"{name}dw_sep_conv_1d.pw_conv", params, kernel_shape=[1]), dims.conv_activation)
        h = _conv(b, h, f"{name}ext_pw_conv_1d", params, kernel_shape=[1])
        return b.op("Transpose", h, perm=[0, 2, 1])
