"""The decoder-only LM graph: embedding -> N decoder layers -> final norm -> lm_head.

Graph I/O follows ORT GenAI's defaults (docs/ortgenai.md §1.3, §3.2, §6.1): `input_ids` [B,S] int64,
`attention_mask` [B,T] int64, `past_key_values.%d.key/value` [B, kv_heads, past, head_dim] with a
symbolic past dimension (a static one would make the runtime force fixed-size mode), and outputs
`logits` [B,S,V] and `present.%d.key/value`. The present dimension gets its own name: with a
shared buffer it is max_length long, not total_sequence_length (docs/split-pipeline.md §4).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.affine_residual import input_affine
from gqa_export.graph.alibi import alibi_bias
from gqa_export.graph.alternating_updates import alternating_layer, merge_streams, spread_streams
from gqa_export.graph.attention import AttentionContext, check_gqa_dims, gqa, gqa_mask_values
from gqa_export.graph.block_residuals import block_attention, block_residual_layer
from gqa_export.graph.blocks import LayerContext, normalize, qkv_projection
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.cca import cca_qkv
from gqa_export.graph.clipped_attention import clipped_attention_inputs
from gqa_export.graph.compressed_kv import compressed_attention, compressed_masks, is_compressed
from gqa_export.graph.decoder_layer import (
    attention_block,
    block_norm,
    decoder_layer,
    layer_mlp,
    layer_scalar,
    state_block,
)
from gqa_export.graph.gqa_inputs import attention_sinks, rotated_qkv
from gqa_export.graph.hyper_connections import collapse_streams, expand_streams, hyper_layer
from gqa_export.graph.input_embedding import embed_input
from gqa_export.graph.latent_attention import latent_flat, latent_mqa
from gqa_export.graph.layer_features import add_layer_features, split_layer_features
from gqa_export.graph.loop_messages import loop_messages
from gqa_export.graph.lora import LoraPlan, check_matched
from gqa_export.graph.mamba2 import prompt_step
from gqa_export.graph.masks import MaskKind, mask_values, state_padding, token_positions
from gqa_export.graph.mrope import mrope_tables
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.outputs import OutputContext, add_outputs, check_io
from gqa_export.graph.params import Params
from gqa_export.graph.per_layer import add_per_layer_input
from gqa_export.graph.positions import log_positions, position_query_scale, power_query_scale
from gqa_export.graph.recurrent_loop import loop_stream
from gqa_export.graph.recurrent_stacks import shared_weights, stack_streams
from gqa_export.graph.recurrent_state import MIXER_NAMES, add_state_outputs, state_inputs, state_layers
from gqa_export.graph.relative_bias import relative_attention_inputs, relative_distances
from gqa_export.graph.rotary import fused_rope_ok, learned_frequency_scale, rope_caches, rope_tables
from gqa_export.graph.rwkv import rwkv_block
from gqa_export.graph.shared_block import shared_block_layer
from gqa_export.graph.shared_kv_attention import rotated_back, shared_kv_block, shared_kv_qkv
from gqa_export.graph.shortcut_moe import add_shortcut
from gqa_export.graph.standard import LayerKV, standard_attention
from gqa_export.graph.state_mixers import STATE_MIXERS, state_mixer
from gqa_export.graph.widened_heads import widened, widened_qkv
from gqa_export.model.dims import LayerDims, ModelDims

# GQA graphs need nothing newer than opset 21; the standard-Attention graphs use Attention-24 and
# TensorScatter-24.
OPSETS = {
    "gqa": {"": 21, "com.microsoft": 1},
    "gqa_bias": {"": 21, "com.microsoft": 1},
    "scatter": {"": 24, "com.microsoft": 1},
    "concat": {"": 24, "com.microsoft": 1},
}
B, S, T = "batch_size", "sequence_length", "total_sequence_length"
PAST, PRESENT = "past_sequence_length", "present_sequence_length"
PAST_KEY, PAST_VALUE = "past_key_values.%d.key", "past_key_values.%d.value"
PRESENT_KEY, PRESENT_VALUE = "present.%d.key", "present.%d.value"


def build_decoder(dims: ModelDims, spec: ArchSpec, params: Params, opts: GraphOptions) -> ir.Model:
    if opts.mode in ("gqa", "gqa_bias"):  # the standard-Attention graphs apply RoPE with plain ops: any rotary dim
        check_gqa_dims(dims, with_bias=opts.mode == "gqa_bias")
    elif state_layers(dims):
        kind = MIXER_NAMES[next(iter(state_layers(dims).values()))]
        raise InputError(f"{spec.name}'s {kind} layers keep their state in the GQA graph only: use --attention gqa")
    elif spec.differential_attention or spec.dynamic_key_bias:
        kind = "differential" if spec.differential_attention else "dynamic mask"
        raise InputError(f"{spec.name}'s {kind} attention is built in the GQA graph only: use --attention gqa")
    elif spec.attention_sinks:
        raise InputError(
            f"{spec.name}'s attention sinks need GroupQueryAttention (its head_sink input): export with --attention gqa"
        )
    b = GraphBuilder("gqa_export_decoder", OPSETS[opts.mode])
    check_io(dims, opts)
    # With inputs_embeds alone the graph has no ids: the mask and position helpers only read its
    # [B, S] shape, which inputs_embeds has too (ids-valued features are refused by check_io). A
    # multimodal package's decoder takes both: the ids feed the image-run mask (docs/multimodal.md §3).
    wide = [B, S, dims.hidden_size * (1 + opts.layer_feature_slices)]
    embeds = b.input("inputs_embeds", opts.io_dtype, wide) if opts.inputs_embeds else None
    input_ids = (
        embeds if embeds is not None and not opts.embeds_with_ids else b.input("input_ids", ir.DataType.INT64, [B, S])
    )
    attention_mask = b.input("attention_mask", ir.DataType.INT64, [B, T])
    # multimodal M-RoPE: the runtime's (t, h, w) positions per token (graph/mrope.py)
    position_ids = b.input("position_ids", ir.DataType.INT64, [3, B, S]) if opts.mrope_positions else None
    # Concrete kv-head and head-dim dims on every cache input: ORT GenAI sizes each layer's buffer
    # from them (per-layer shapes, docs/gemma4.md §4). KV-shared layers have no cache inputs at all.
    pasts: dict[int, tuple[ir.Value, ir.Value]] = {}
    for i in dims.cache_layers:
        layer = dims.layers[i]
        kv_shape = [B, layer.num_kv_heads, PAST, layer.head_dim]
        slot = dims.cache_slot(i)  # i, except in an unrolled loop (HF's cache order)
        pasts[i] = (
            b.input(PAST_KEY % slot, opts.io_dtype, kv_shape),
            b.input(PAST_VALUE % slot, opts.io_dtype, kv_shape),
        )
    pasts |= {i: pasts[owner] for i, owner in dims.cache_readers.items()}  # read, never written (Dory's last_loop)
    state_pasts = state_inputs(b, dims, opts.io_dtype)  # layers with recurrent state instead of a KV cache
    state_presents: dict[int, tuple[ir.Value, ...]] = {}
    attend = _attention_fn(b, dims, spec, params, opts, input_ids, attention_mask, position_ids)

    features: list[ir.Value] = []
    if embeds is not None and opts.layer_feature_slices:  # docs/multimodal.md §11.5
        embeds, features = split_layer_features(b, embeds, dims.hidden_size, opts.layer_feature_slices, opts.io_dtype)
    h, embed, per_layer = embed_input(b, embeds, input_ids, attention_mask, dims, spec, params, opts.io_dtype)
    h = input_affine(b, h, spec, params, dims.hidden_size)  # ZAYA: (e + bias) * scale
    embeddings = h  # the token embeddings, which Zamba2's shared blocks read beside each layer's input

    query_scale = position_query_scale(b, dims.query_scale, input_ids, attention_mask, opts.io_dtype)
    # Llama-4's attention temperature tuning: NoPE layers' queries, at positions counted from 1
    nope_scale = position_query_scale(
        b, dims.nope_query_scale, input_ids, attention_mask, opts.io_dtype, offset=1, scope="nope_query_scale"
    ) or power_query_scale(b, dims.nope_query_power, input_ids, attention_mask, opts.io_dtype)  # Beam's
    # the RG-LRU's reset reads where each row's position 0 falls
    first = dims.rglru is not None
    padding = state_padding(b, input_ids, attention_mask, opts.io_dtype, first) if state_pasts else None
    clamped = dims.mamba2 is not None and dims.mamba2.prompt_clamped  # Mamba2's prompt-only dt clamp
    prompt = prompt_step(b, input_ids, attention_mask) if clamped else None
    kv: dict[int, LayerKV | None] = {}
    lora = LoraPlan(opts.lora_targets) if opts.lora_targets else None
    shortcut = {} if spec.moe is not None and spec.moe.shortcut else None  # LongCat-Flash's pending sparse outputs
    h = spread_streams(b, h, dims, spec, params) if dims.altup else h  # AltUp: [B, S, K, H] streams
    h = expand_streams(b, h, dims) if dims.hyper else h  # hyper-connections: [B, S, K, H] copies
    carried: dict[str, ir.Value] = {}  # values one layer hands the next (ZAYA's router stream)
    if spec.latent_attention is not None and spec.latent_attention.query_log_scale:  # Mistral-Large-4's
        carried["log_positions"] = log_positions(b, input_ids, attention_mask, opts.io_dtype)
    if dims.moe is not None and dims.moe.hashed:  # DeepSeek-V4's hash layers choose experts by the token id
        if input_ids is embeds:
            raise InputError(f"{spec.name}'s hash-routed layers read the input ids: --inputs-embeds is not supported")
        carried["input_ids"] = input_ids
    streams = stack_streams(b, h, dims, spec, params)  # HRM-Text: stacks run in cycles over two streams
    loop = loop_stream(b, dims, params)  # Dory: the middle layers run in a loop
    blocks: list[ir.Value] | None = [] if spec.block_residuals is not None else None  # Inkling2's block states
    gates = spec.block_residuals.messages if spec.block_residuals is not None else None  # Inkling2-Loop's
    passes = loop_messages(b, dims, params, spec.tensor(gates.query) if gates is not None else None)
    for i in range(dims.num_layers):
        with b.scope(f"layers.{i}"), shared_weights(b, streams is not None or loop is not None):
            layer = dims.layers[i]
            scale = nope_scale if layer.rope is None and nope_scale is not None else query_scale
            lc = LayerContext(
                b, i, dims.of_layer(layer), spec, params, opts.packed_qkv, scale, padding, prompt_step=prompt,
                lora=lora, shortcut=shortcut, packed_gate_up=opts.packed_gate_up, carried=carried,
                state_io=(state_pasts[i], state_presents) if layer.mixer in ("cca", "residual_convs") else None,
            )  # fmt: skip
            if layer.mixer == "rwkv":  # the whole block carries state: both its halves shift tokens
                h, state_presents[i] = rwkv_block(lc, h, *state_pasts[i])
                continue
            state = attention = None
            if layer.mixer in STATE_MIXERS:
                state = partial(state_mixer, STATE_MIXERS[layer.mixer], pasts=state_pasts[i], presents=state_presents)
            if layer.attends:
                source = kv[layer.kv_source] if layer.shares_kv else None
                attention = partial(attend, past=pasts.get(i), source=source)
            if layer.shared_use >= 0:  # Zamba2: a shared transformer block ahead of the mixer
                assert attention is not None and state is not None
                h, kv[i] = shared_block_layer(lc, h, embeddings, attention, state)  # type: ignore[assignment]
                continue
            if dims.altup:  # the layer computes the active stream; the per-layer input goes to the others
                layer_fn = partial(decoder_layer, attention=attention, state=state)
                h, kv[i] = alternating_layer(lc, h, layer_fn, per_layer)
                continue
            if blocks is not None:  # Inkling2: its inputs attended over the stacked block states
                assert attention is not None
                h, messages = passes.enter(i, h, blocks) if passes is not None else (h, None)
                h, kv[i] = block_residual_layer(lc, h, blocks, attention, messages)
                continue
            if dims.hyper:  # each block reads a weighted sum of the copies and is spread back over them
                attend_block = shared_kv_block if spec.shared_kv_attention is not None else attention_block
                mixer = partial(attend_block, attention=attention) if state is None else partial(state_block, state)
                h, kv[i] = hyper_layer(lc, h, mixer, layer_mlp, block_norm)
                continue
            h = streams.enter(i, h) if streams is not None else h
            h = loop.enter(i, h) if loop is not None else h
            h, kv[i] = decoder_layer(lc, h, attention, state)
            h = streams.leave(i, h) if streams is not None else h
            h = add_shortcut(lc, h)
            if per_layer is not None:
                h = add_per_layer_input(lc, h, per_layer)
            h = layer_scalar(lc, h)
            h = add_layer_features(b, h, features, i)

    check_matched(lora)
    h = merge_streams(b, h, dims, spec, params) if dims.altup else h
    h = collapse_streams(b, h, dims, spec, params) if dims.hyper else h
    if blocks is not None and spec.block_residuals is not None:  # the final norm's input attended over the blocks
        with b.scope("final_input"):
            h = block_attention(b, params, spec.tensor(spec.block_residuals.final), blocks, h, dims.hidden_size)[0]
    x = final_norm(b, h, spec, params, dims)
    add_outputs(b, x, embed, attention_mask, input_ids, OutputContext(dims, spec, params, opts))
    for i in dims.cache_layers:
        layer, layer_kv = dims.layers[i], kv[i]
        present_shape = [B, layer.num_kv_heads, PRESENT, layer.head_dim]
        assert layer_kv is not None and layer_kv.present_key is not None and layer_kv.present_value is not None
        slot = dims.cache_slot(i)
        b.output(layer_kv.present_key, PRESENT_KEY % slot, opts.io_dtype, present_shape)
        b.output(layer_kv.present_value, PRESENT_VALUE % slot, opts.io_dtype, present_shape)
    add_state_outputs(b, dims, state_presents, opts.io_dtype)
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _attention_fn(
    b: GraphBuilder,
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
    opts: GraphOptions,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    position_ids: ir.Value | None = None,
) -> Callable[..., tuple[ir.Value, LayerKV]]:
    """The per-layer attention of the graph's mode, with the graph-wide values it reads built once.
    With `position_ids` [3, B, S] every rope is M-RoPE, applied with plain ops (graph/mrope.py)."""
    if opts.mode in ("gqa", "gqa_bias"):
        seqlens, total = gqa_mask_values(b, attention_mask)
        learned = learned_frequency_scale(spec, params)  # Mistral-Large-4's LeRoPE
        ctx = AttentionContext(seqlens, total, rope_caches(b, dims, params, opts, total, learned))
        # ropes GQA's fused RoPE cannot compute exactly are applied with plain ops before it
        head_dims = {layer.rope: layer.head_dim for layer in dims.layers if layer.rope is not None}
        # norms after RoPE, or rope on part of a latent-attention head: RoPE before GQA
        # nGPT's query scale after RoPE (graph/ngpt_scales.py): RoPE before GQA too
        fused_ok = opts.fused_rope and not spec.qk_norm_after_rope and dims.latent is None and spec.ngpt is None
        fused_ok = fused_ok and spec.shared_kv_attention is None  # DeepSeek-V4: the trailing channels rotate
        plain = {k for k, d in head_dims.items() if not (fused_ok and fused_rope_ok(dims.ropes[k], d))}
        tables = {}
        if position_ids is not None:
            tables = mrope_tables(b, position_ids, ctx.rope_caches, dims.ropes, opts.io_dtype)
        elif plain:
            positions = token_positions(b, input_ids, attention_mask)
            tables = rope_tables(b, positions, {k: ctx.rope_caches[k] for k in sorted(plain)})
        biases: dict[MaskKind, ir.Value] = {}
        # Inkling: a relative position bias per query and head, its distances built once (graph/relative_bias.py)
        distances = relative_distances(b, dims, input_ids, attention_mask, opts.io_dtype) if dims.relative else None
        if opts.mode == "gqa_bias":  # a bias only where a layer needs more than GQA's own masking
            kinds = {mask_kind(opts, layer) for layer in dims.layers} - {MaskKind(w, False) for w in _windows(dims)}
            masks = mask_values(
                b, input_ids, attention_mask, "compact", kinds, opts.bidirectional_ids, opts.io_dtype,
                opts.bidirectional_window_bounded,
            )  # fmt: skip
            biases = masks.biases
        compact = compressed_masks(b, dims, input_ids, attention_mask, opts.io_dtype)  # DeepSeek-V4's CSA / HCA

        def attend_gqa(
            lc: LayerContext, x: ir.Value, past: tuple[ir.Value, ir.Value] | None, source: LayerKV | None
        ) -> tuple[ir.Value, LayerKV]:
            layer = lc.layer
            if source is not None:  # GQA's shared-KV mode reads the producer's present outputs
                assert source.present_key is not None and source.present_value is not None
                past = (source.present_key, source.present_value)
            assert past is not None
            # A window-sized buffer only where no other layer reads this cache (docs/gemma4.md §3.3).
            window_cache = opts.sliding_window_cache and not layer.shares_kv and lc.i not in dims.kv_producers
            if compact is not None and is_compressed(lc):  # plain ops over [sliding | pooled keys]
                table, window = tables[layer.rope], compact.biases[MaskKind(layer.window, False)]  # type: ignore[index]
                out, kv = compressed_attention(lc, x, past, table, ctx.rope_caches[layer.rope], compact, window)  # type: ignore[index]
                return rotated_back(lc, out, table), kv
            bias = biases.get(mask_kind(opts, layer))
            sinks = attention_sinks(lc)
            if distances is not None:  # the bias goes in as a score bias; keys slotted by position (no window cache)
                clipped = spec.relative_bias is not None and spec.relative_bias.clipped is not None
                inputs = clipped_attention_inputs if clipped else relative_attention_inputs  # Inkling2's / Inkling's
                qkv, relative, head_sink = inputs(lc, x, distances)  # type: ignore[operator]
                out, key, value = gqa(b, qkv, past, ctx, lc.dims, layer, False, relative, head_sink, additive=True)
                assert key is not None and value is not None
                return out, LayerKV(key, value, key, value)
            if lc.dims.latent is not None:
                latent = latent_mqa if lc.dims.latent.cached else latent_flat
                qkv = latent(lc, x, tables.get(layer.rope))  # type: ignore[arg-type]
            elif lc.spec.shared_kv_attention is not None:  # DeepSeek-V4: one head as key and value
                qkv = shared_kv_qkv(lc, x, tables[layer.rope])  # type: ignore[index]
            elif lc.state_io is not None:  # ZAYA: q|k convolved, a delayed value, q/k L2-normed (graph/cca.py)
                qkv = cca_qkv(lc, x, tables.get(layer.rope))  # type: ignore[arg-type]
            elif widened(lc):  # DiffLlama, Doge: cache heads wider than the projections' (graph/widened_heads.py)
                qkv = widened_qkv(lc, x, tables.get(layer.rope))  # type: ignore[arg-type]
            elif layer.rope in tables:
                qkv = rotated_qkv(lc, x, tables[layer.rope])
            else:
                qkv = qkv_projection(lc, x)
            fused = layer.rope not in tables
            out, key, value = gqa(b, qkv, past, ctx, lc.dims, layer, window_cache, bias, sinks, fused)
            if lc.spec.shared_kv_attention is not None:  # the values' rotation undone at the query's angle
                out = rotated_back(lc, out, tables[layer.rope])  # type: ignore[index]
            if source is not None:
                return out, source
            assert key is not None and value is not None
            return out, LayerKV(key, value, key, value)

        return attend_gqa
    layout = "concat" if opts.mode == "concat" else opts.kv_read
    kinds = {mask_kind(opts, layer) for layer in dims.layers}
    if layout != "concat" and not dims.alibi:  # plain causal layers need no mask: is_causal + nonpad_kv_seqlen
        kinds.discard(MaskKind(-1, False))
    first_past = next((v for v in b.graph.inputs if v.name and v.name.startswith("past_key_values.")), None)
    key_length = b.op("Shape", first_past, start=2, end=3) if layout == "nonpad" and first_past is not None else None
    masks = mask_values(
        b, input_ids, attention_mask, "concat" if layout == "concat" else "compact", kinds,
        opts.bidirectional_ids, opts.io_dtype, opts.bidirectional_window_bounded, key_length,
    )  # fmt: skip
    total = b.op("Cast", b.op("Squeeze", masks.total_length), to=ir.DataType.INT32, name="total_length_int32")
    caches = rope_caches(b, dims, params, opts, total, learned_frequency_scale(spec, params))
    rope = (
        rope_tables(b, masks.positions, caches) if position_ids is None
        else mrope_tables(b, position_ids, caches, dims.ropes, opts.io_dtype)
    )  # fmt: skip
    biases = masks.biases
    if dims.alibi:  # every layer's mask plus the per-head ALiBi bias
        alibi = alibi_bias(b, masks, dims.alibi, opts.io_dtype)
        biases = {kind: b.op("Add", bias, alibi, name=f"alibi_{i}") for i, (kind, bias) in enumerate(biases.items())}

    def attend_standard(
        lc: LayerContext, x: ir.Value, past: tuple[ir.Value, ir.Value] | None, source: LayerKV | None
    ) -> tuple[ir.Value, LayerKV]:
        bias = biases.get(mask_kind(opts, lc.layer))
        return standard_attention(lc, x, past, bias, masks, rope, layout, source)

    return attend_standard


def final_norm(b: GraphBuilder, h: ir.Value, spec: ArchSpec, params: Params, dims: ModelDims) -> ir.Value:
    """The final norm, where the family has one (GPT-1's last layer ends in its own LayerNorm)."""
    if spec.final_norm is None:
        return h
    offset = spec.final_norm_offset  # Muse-Glimmer's plain w beside its layers' 1 + w; None: the family's
    return normalize(b, h, spec.tensor(spec.final_norm), params, dims, "norm", dims.hidden_size, offset=offset)


def _windows(dims: ModelDims) -> set[int]:
    return {layer.window for layer in dims.layers}


def mask_kind(opts: GraphOptions, layer: LayerDims) -> MaskKind:
    bidirectional = bool(opts.bidirectional_ids) and (opts.bidirectional_layers == "all" or layer.window > 0)
    return MaskKind(layer.window, bidirectional, layer.chunk)
