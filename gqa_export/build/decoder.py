"""The decoder-only LM graph: embedding -> N x (RMSNorm, attention, RMSNorm, SwiGLU) -> lm_head.

Graph I/O follows ORT GenAI's defaults (ortgenai.md §1.4, §6a): `input_ids` [B,S] int64,
`attention_mask` [B,T] int64, `past_key_values.%d.key/value` [B, kv_heads, past, head_dim] with a
symbolic past dimension (a static one would make the runtime force fixed-size mode), and outputs
`logits` [B,S,V] and `present.%d.key/value`. The present dimension gets its own name: with a
shared buffer it is max_length long, not total_sequence_length (split-pipeline.md, pitfalls).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.arch.spec import ArchSpec
from gqa_export.build.attention import LayerAttention, check_gqa_dims, gqa_attention, linear, mask_context
from gqa_export.build.dims import ModelDims
from gqa_export.build.graph import GraphBuilder, typed
from gqa_export.build.params import Params
from gqa_export.build.rope import cos_sin_tables

OPSETS = {"": 21, "com.microsoft": 1}
B, S, T = "batch_size", "sequence_length", "total_sequence_length"
PAST, PRESENT = "past_sequence_length", "present_sequence_length"
PAST_KEY, PAST_VALUE = "past_key_values.%d.key", "past_key_values.%d.value"
PRESENT_KEY, PRESENT_VALUE = "present.%d.key", "present.%d.value"


@dataclass(frozen=True)
class GraphOptions:
    io_dtype: ir.DataType  # activations, KV cache, cos/sin
    logits_dtype: ir.DataType
    rope_rows: int  # cos/sin rows: must cover search.max_length
    packed_qkv: bool = True


def build_decoder(dims: ModelDims, spec: ArchSpec, params: Params, opts: GraphOptions) -> ir.Model:
    check_gqa_dims(dims)
    b = GraphBuilder("gqa_export_decoder", OPSETS)
    hidden_shape = [B, S, dims.hidden_size]
    kv_shape = [B, dims.num_kv_heads, PAST, dims.head_dim]
    input_ids = b.input("input_ids", ir.DataType.INT64, [B, S])
    attention_mask = b.input("attention_mask", ir.DataType.INT64, [B, T])
    pasts = [
        (b.input(PAST_KEY % i, opts.io_dtype, kv_shape), b.input(PAST_VALUE % i, opts.io_dtype, kv_shape))
        for i in range(dims.num_layers)
    ]
    cos, sin = cos_sin_tables(dims.rope, opts.rope_rows, dims.max_position_embeddings)
    ctx = mask_context(
        b, attention_mask, b.initializer("cos_cache", params.table(cos)), b.initializer("sin_cache", params.table(sin))
    )
    embed = b.initializer(spec.embed, params.matrix(spec.embed))
    with b.scope("embed_tokens"):
        h = typed(b.op("Gather", embed, input_ids), opts.io_dtype, hidden_shape)

    presents = []
    for i in range(dims.num_layers):
        with b.scope(f"layers.{i}"):
            h, present = _decoder_layer(b, h, i, pasts[i], ctx, dims, spec, params, opts)
            presents.append(present)

    x = _rms_norm(b, h, spec.final_norm, params, dims, "norm")
    logits = _lm_head(b, x, embed, dims, spec, params, opts)
    b.output(logits, "logits", opts.logits_dtype, [B, S, dims.vocab_size])
    present_shape = [B, dims.num_kv_heads, PRESENT, dims.head_dim]
    for i, (key, value) in enumerate(presents):
        b.output(key, PRESENT_KEY % i, opts.io_dtype, present_shape)
        b.output(value, PRESENT_VALUE % i, opts.io_dtype, present_shape)
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _decoder_layer(
    b: GraphBuilder,
    h: ir.Value,
    i: int,
    past: tuple[ir.Value, ir.Value],
    ctx,
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
    opts: GraphOptions,
) -> tuple[ir.Value, tuple[ir.Value, ir.Value]]:
    names = spec.layer
    hidden_shape = [B, S, dims.hidden_size]
    x = _rms_norm(b, h, spec.layer_tensor(i, names.input_norm), params, dims, "input_layernorm")
    with b.scope("attn"):
        attn = _layer_attention(b, i, dims, spec, params, opts)
        y, present_k, present_v = gqa_attention(b, x, attn, ctx, past[0], past[1], dims)
    h = typed(b.op("Add", h, typed(y, opts.io_dtype, hidden_shape), name="residual_attn"), opts.io_dtype, hidden_shape)
    x = _rms_norm(b, h, spec.layer_tensor(i, names.post_attention_norm), params, dims, "post_attention_layernorm")
    with b.scope("mlp"):
        y = _swiglu(b, x, i, dims, spec, params)
    h = typed(b.op("Add", h, typed(y, opts.io_dtype, hidden_shape), name="residual_mlp"), opts.io_dtype, hidden_shape)
    return h, (present_k, present_v)


def _weight(b: GraphBuilder, params: Params, names: list[str], graph_name: str) -> ir.Value:
    return b.initializer(graph_name, params.matmul_weight(names))


def _bias(b: GraphBuilder, params: Params, names: list[str], graph_name: str) -> ir.Value:
    return b.initializer(graph_name, params.vector(names))


def _layer_attention(
    b: GraphBuilder, i: int, dims: ModelDims, spec: ArchSpec, params: Params, opts: GraphOptions
) -> LayerAttention:
    L = spec.layer
    mods = [L.q, L.k, L.v]
    w = lambda ms, suffix="weight": [spec.layer_tensor(i, m, suffix) for m in ms]  # noqa: E731
    prefix = spec.layer_prefix.format(i=i)
    if opts.packed_qkv:
        qkv = [_weight(b, params, w(mods), f"{prefix}self_attn.qkv_proj.weight")]
        qkv_bias = (
            [_bias(b, params, w(mods, "bias"), f"{prefix}self_attn.qkv_proj.bias")] if dims.attention_bias else []
        )
    else:
        qkv = [_weight(b, params, w([m]), spec.layer_tensor(i, m)) for m in mods]
        qkv_bias = (
            [_bias(b, params, w([m], "bias"), spec.layer_tensor(i, m, "bias")) for m in mods]
            if dims.attention_bias
            else []
        )
    o = _weight(b, params, w([L.o]), spec.layer_tensor(i, L.o))
    o_bias = _bias(b, params, w([L.o], "bias"), spec.layer_tensor(i, L.o, "bias")) if dims.attention_bias else None
    return LayerAttention(qkv=qkv, qkv_bias=qkv_bias, o=o, o_bias=o_bias)


def _swiglu(b: GraphBuilder, x: ir.Value, i: int, dims: ModelDims, spec: ArchSpec, params: Params) -> ir.Value:
    """down(silu(gate(x)) * up(x)) with gate and up packed into one MatMul, then split."""
    L = spec.layer
    prefix = spec.layer_prefix.format(i=i)
    gu_names = [spec.layer_tensor(i, L.gate), spec.layer_tensor(i, L.up)]
    gate_up_w = _weight(b, params, gu_names, f"{prefix}mlp.gate_up_proj.weight")
    gate_up_b = (
        _bias(b, params, [spec.layer_tensor(i, m, "bias") for m in (L.gate, L.up)], f"{prefix}mlp.gate_up_proj.bias")
        if dims.mlp_bias
        else None
    )
    gate_up = linear(b, x, gate_up_w, gate_up_b, "gate_up_proj")
    split = b.const([dims.intermediate_size, dims.intermediate_size], "split", "int64")
    gate, up = b.op_multi("Split", gate_up, split, axis=-1, outputs=2)
    act = b.op("Mul", gate, b.op("Sigmoid", gate), name="silu")
    down_w = _weight(b, params, [spec.layer_tensor(i, L.down)], spec.layer_tensor(i, L.down))
    down_b = (
        _bias(b, params, [spec.layer_tensor(i, L.down, "bias")], spec.layer_tensor(i, L.down, "bias"))
        if dims.mlp_bias
        else None
    )
    return linear(b, b.op("Mul", act, up), down_w, down_b, "down_proj")


def _rms_norm(b: GraphBuilder, x: ir.Value, weight_name: str, params: Params, dims: ModelDims, name: str) -> ir.Value:
    """ORT's SimplifiedLayerNormalization (RMSNorm, computed in fp32: stash_type=1).

    The optimize stage fuses it with the preceding residual Add into SkipSimplifiedLayerNormalization.
    """
    w = b.initializer(weight_name, params.vector([weight_name]))
    out = b.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=dims.rms_eps, stash_type=1, name=name)
    return typed(out, params.dtype, [B, S, dims.hidden_size])


def _lm_head(
    b: GraphBuilder, x: ir.Value, embed: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params, opts: GraphOptions
) -> ir.Value:
    with b.scope("lm_head"):
        if dims.tie_word_embeddings:
            # Tied: Gemm(transB=1) reads the embedding table itself, so neither the file nor the
            # session holds a transposed copy (a MatMul on Transpose(E) would be folded into one).
            flat = b.op("Reshape", x, b.const([-1, dims.hidden_size], "flat", "int64"))
            logits2d = b.op("Gemm", flat, embed, transB=1)
            out_shape = b.op("Concat", b.op("Shape", x, end=2), b.const([dims.vocab_size], "vocab", "int64"), axis=0)
            logits = b.op("Reshape", logits2d, out_shape)
        else:
            logits = b.op("MatMul", x, _weight(b, params, [spec.lm_head], spec.lm_head))
        if opts.logits_dtype != opts.io_dtype:
            logits = b.op("Cast", logits, to=opts.logits_dtype)
    return logits
