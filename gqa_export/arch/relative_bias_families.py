"""Families whose attention adds a relative position bias computed per query and head (Inkling)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.mixer_spec import MixerSpec
from gqa_export.arch.moe_spec import MoeNames, MoeSpec
from gqa_export.arch.relative_bias_spec import (
    BlockResidualNames,
    ClippedAttentionNames,
    LoopMessageNames,
    RelativeBiasNames,
    ResidualConvNames,
)
from gqa_export.arch.row_views import alternating, deinterleaved
from gqa_export.arch.spec import ArchSpec, LayerNames, config_keys

# the serving layout's experts' w13 [E, 2I, H] (rows gate j, up j alternating) under its renamed name
_W13_EXPERTS = r"\.mlp\.experts\.gate_up_proj$"

# Inkling's serving layout (the hub's `model.llm.*`, its multimodal class's), renamed as transformers 5.25's conversion
# mapping for inkling_mm_model renames it (source/stored_renames.py): the experts' interleaved w13 read apart, the dense
# MLPs' and shared experts' split into gate and up (`row_views`, arch/row_views.py)
_INKLING_SERVING_LAYOUT: tuple[tuple[str, str, bool], ...] = (
    (r"^model\.llm\.unembed\.", "lm_head.", False),
    (r"^model\.llm\.", "model.", False),
    (r"\.embed\.weight$", ".embed_tokens.weight", False),
    (r"\.embed_norm\.", ".embed_tokens.embed_norm.", False),
    (r"\.mlp\.experts\.w13_weight$", ".mlp.experts.gate_up_proj", False),
    (r"\.mlp\.experts\.w2_weight$", ".mlp.experts.down_proj", False),
    (r"\.shared_experts\.shared_w2_weight$", ".shared_experts.down_proj", False),
    (r"\.mlp\.w2_md\.", ".mlp.down_proj.", False),
    (r"\.mlp\.gate\.bias$", ".mlp.gate.e_score_correction_bias", False),
    (r"\.attn\.wq_du\.", ".self_attn.q_proj.", False),
    (r"\.attn\.wk_dv\.", ".self_attn.k_proj.", False),
    (r"\.attn\.wv_dv\.", ".self_attn.v_proj.", False),
    (r"\.attn\.wr_du\.", ".self_attn.r_proj.", False),
    (r"\.attn\.wo_ud\.", ".self_attn.o_proj.", False),
    (r"\.attn\.(q_norm|k_norm|rel_logits_proj)\.", r".self_attn.\1.", False),
    (r"\.attn\.(k|v)_sconv\.", r".self_attn.\1_sconv.conv1d.", False),
    (r"\.(attn|mlp)_sconv\.weight$", r".\1_sconv.conv1d.weight", False),
    (r"\.mlp_norm\.", ".post_attention_layernorm.", False),
    (r"\.attn_norm\.", ".input_layernorm.", False),
)

# Inkling (transformers 5.25, `inkling_text`): pre-norm layers, every one attention without RoPE ("hybrid" full,
# "hybrid_sliding" windowed, each kind with its own query / kv heads and head_dim), per-head q/k RMSNorms and
# scores times 1 / head_dim; a relative position bias per query and head (r_proj(x) times a learned bank, zero
# past rel_extent, a sliding layer's extent its window; graph/relative_bias.py), the full layers' queries and
# bias log-scaled past log_scaling_n_floor; residual short convolutions (kernel conv_kernel_size, float32) on
# the keys and values before the key norm and the cache, on the attention output and on the MLP output, four
# states per layer carried in genai's RecurrentState pair beside the KV cache (graph/residual_convs.py); the
# embedding RMSNormed; dense layers a SwiGLU MLP times a stored scalar, sparse ones the top k of sigmoid +
# selection bias among the routed experts, weighted together with the shared experts by their sigmoids
# normalized over both, times route_scale and a learned scalar (graph/shared_sink_routing.py); logits over
# logits_mup_width_multiplier, the lm_head's first unpadded_vocab_size rows where set
INKLING = ArchSpec(
    name="inkling",
    qk_norm="head",
    rope_layers="none",
    inverse_head_dim_scale=True,
    embedding_norm="embed_tokens.embed_norm.weight",
    layer=LayerNames(
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        mlp_output_scale="mlp.global_scale",
    ),
    layer_type_names=MappingProxyType({"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}),
    mixers=MixerSpec(kinds=MappingProxyType({}), mixing="parallel", every_layer="residual_convs"),
    head_rows_dropped=True,
    relative_bias=RelativeBiasNames(),
    residual_convs=ResidualConvNames(),
    moe=MoeSpec(
        MoeNames(
            shared_expert="shared_experts", expert_bias="gate.e_score_correction_bias", router_scale="gate.global_scale"
        ),
        routing="sigmoid_shared_sink",
        shared_width="per_expert",
        router_dtype="float32",
    ),
    config_keys=config_keys(
        sliding_window="sliding_window_size|sliding_window",
        routed_scaling="route_scale",
        logits_scaling="logits_mup_width_multiplier",
        output_vocab_size="unpadded_vocab_size",
        conv_kernel="conv_kernel_size|sconv_kernel_size",
    ),
    stored_renames=_INKLING_SERVING_LAYOUT,  # read where the checkpoint has no model.embed_tokens
    row_views=(
        deinterleaved(_W13_EXPERTS),
        *alternating(r"\.mlp\.w13_dn\.weight$", ".mlp.gate_proj.weight", ".mlp.up_proj.weight"),
        *alternating(r"\.shared_experts\.shared_w13_weight$", ".shared_experts.gate_proj", ".shared_experts.up_proj"),
    ),
)


def _next_layer_query(match: re.Match[str]) -> str:
    """The serving layout's attn_res.attn_queries.{i}: layer i + 1's attention-input query (layer 0 has none)."""
    return f"layers.{int(match[1]) + 1}.attention_input.query"


# Inkling2's serving layout (the hub's `model.llm.*`), renamed as transformers 5.25's conversion mapping for
# inkling2_text renames it, in its order (source/stored_renames.py): the padded unembed is the lm_head (its first
# unpadded_vocab_size rows read, head_rows_dropped), the experts' interleaved w13 read apart (row_views)
_INKLING2_SERVING_LAYOUT: tuple[tuple[str, str | Callable[[re.Match[str]], str], bool], ...] = (
    (r"^model\.llm\.unembed\.", "lm_head.", False),
    (r"^model\.llm\.", "model.", False),
    (r"\.embed\.weight$", ".embed_tokens.weight", False),
    (r"\.embed_norm\.", ".embed_tokens.embed_norm.", False),
    (r"\.mlp\.experts\.w13_weight$", ".mlp.experts.gate_up_proj", False),
    (r"\.mlp\.experts\.w2_weight$", ".mlp.experts.down_proj", False),
    (r"\.mlp\.gate\.bias$", ".mlp.gate.e_score_correction_bias", False),
    (r"\.attn\.", ".self_attn.", False),
    (r"\.self_attn\.wq_du\.", ".self_attn.q_proj.linear.", False),
    (r"\.self_attn\.wk_dv\.", ".self_attn.k_proj.linear.", False),
    (r"\.self_attn\.wv_dv\.", ".self_attn.v_proj.linear.", False),
    (r"\.self_attn\.k_sconv\.", ".self_attn.k_proj.sconv.", False),
    (r"\.self_attn\.v_sconv\.", ".self_attn.v_proj.sconv.", False),
    (r"\.self_attn\.rel_logits_proj\.", ".self_attn.relative_position_bias.", False),
    (r"\.self_attn\.wr_du\.", ".self_attn.relative_position_bias.linear.", False),
    (r"\.self_attn\.q_l2_clip\.", ".self_attn.q_proj.norm.", False),
    (r"\.self_attn\.rel_l2_clip\.", ".self_attn.relative_position_bias.norm.", False),
    (r"\.self_attn\.wo_ud\.", ".self_attn.o_proj.linear.", False),
    (r"\.self_attn\.gate_attn\.", ".self_attn.o_proj.gate_proj.", False),
    (r"\.self_attn\.attn_sink_proj\.", ".self_attn.sink_proj.", False),
    (r"\.attn_sconv\.", ".post_attention_convolution.", False),
    (r"\.mlp_sconv\.", ".post_mlp_convolution.", False),
    (r"(convolution|sconv)\.weight$", r"\1.conv1d.weight", False),
    (r"(convolution|sconv)\.static_w$", r"\1.static_weight", False),
    (r"(convolution|sconv)\.weight_proj$", r"\1.weight_proj.weight", False),
    (r"\.mlp_norm\.", ".post_attention_layernorm.", False),
    (r"\.attn_norm\.", ".input_layernorm.", False),
    (r"\.(q|k|v)_input_norm\.", r".\1_input_layernorm.", False),
    (r"attn_res\.attn_queries\.(\d+)$", _next_layer_query, False),
    (r"attn_res\.mlp_queries\.(\d+)$", r"layers.\1.mlp_input.query", False),
    (r"attn_res\.output_query$", "final_input.query", False),
)


# Inkling2 (transformers 5.25, `inkling2_text`): Inkling's layers and their relative bias and residual convolutions
# (outputs over sqrt(K + 1)), with each layer's attention, MLP and final-norm inputs attended over stacked block
# states (graph/block_residuals.py); learned-scale L2 clips on queries and relative states, keys clipped, values
# RMS-normed without a weight, a sink logit per token and head, the full layers' keys and values convolved with
# per-token taps (graph/clipped_attention.py), a sigmoid gate of the layer input before o_proj, scores times
# head_dim ** -0.5; every layer's MLP experts whose SwiGLU soft-caps the gate's linear factor and up (plain ops)
# under a sigmoid router renormalized; logits soft-capped, the lm_head stored unpadded_vocab_size rows
INKLING2 = ArchSpec(
    name="inkling2",
    rope_layers="none",
    embedding_norm="embed_tokens.embed_norm.weight",
    layer=LayerNames(
        q="self_attn.q_proj.linear",
        k="self_attn.k_proj.linear",
        v="self_attn.v_proj.linear",
        o="self_attn.o_proj.linear",
        output_gate="self_attn.o_proj.gate_proj",
    ),
    layer_type_names=MappingProxyType({"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}),
    mixers=MixerSpec(kinds=MappingProxyType({}), mixing="parallel", every_layer="residual_convs"),
    relative_bias=RelativeBiasNames(
        r_proj="self_attn.relative_position_bias.linear",
        bank="self_attn.relative_position_bias.proj",
        clipped=ClippedAttentionNames(),
    ),
    residual_convs=ResidualConvNames(
        key="self_attn.k_proj.sconv.conv1d",
        value="self_attn.v_proj.sconv.conv1d",
        attention="post_attention_convolution.conv1d",
        mlp="post_mlp_convolution.conv1d",
        scaled=True,
    ),
    block_residuals=BlockResidualNames(),
    moe=MoeSpec(
        MoeNames(expert_bias="gate.e_score_correction_bias"),
        routing="sigmoid_topk",
        normalize=True,
        activation="swiglu_softcapped",
        router_dtype="float32",
    ),
    config_keys=config_keys(
        sliding_window="sliding_window_size|sliding_window",
        routed_scaling="route_scale",
        output_vocab_size="unpadded_vocab_size",
        conv_kernel="conv_kernel_size|sconv_kernel_size",
        expert_intermediate_size="moe_intermediate_size",
    ),
    stored_renames=_INKLING2_SERVING_LAYOUT,  # read where the checkpoint has no model.embed_tokens
    row_views=(deinterleaved(_W13_EXPERTS),),
    head_rows_dropped=True,
)

# Inkling2-Loop's serving layout: Inkling2's, its message gates under `controllers.{attn,k,v,mlp}` renamed first (as
# transformers 5.25's inkling2_loop_text mapping does, before Inkling2's `.attn.` rename); the two stored message-query
# tensors merged into one (LoopMessageNames.stored_queries, source/stored_renames.py)
_INKLING2_LOOP_SERVING_LAYOUT: tuple[tuple[str, str | Callable[[re.Match[str]], str], bool], ...] = (
    (r"\.controllers\.attn\.", ".q_message_gate.", False),
    (r"\.controllers\.(k|v|mlp)\.", r".\1_message_gate.", False),
    (r"_message_gate\.down_weight$", "_message_gate.down_proj.weight", False),
    (r"_message_gate\.gain_weight$", "_message_gate.message_gate_proj.weight", False),
    (r"_message_gate\.forget_weight$", "_message_gate.forget_gate_proj.weight", False),
    *_INKLING2_SERVING_LAYOUT,
)

# Inkling2-Loop (transformers 5.25, `inkling2_loop_text`): Inkling2 whose layers loop_layer_index_start ..
# loop_layer_index_end - 1 run loop_num_passes times with shared weights, each pass from the loop's input (stream and
# block stack) with its own KV caches and convolution states, unrolled (model/recurrent_loop.py); each later pass's
# layers gate into their query, key, value and MLP inputs messages that learned queries attend over the previous
# pass's block states and output (graph/loop_messages.py, graph/message_gates.py)
INKLING2_LOOP = replace(
    INKLING2,
    name="inkling2_loop",
    recurrent_loop=True,
    block_residuals=BlockResidualNames(messages=LoopMessageNames()),
    stored_renames=_INKLING2_LOOP_SERVING_LAYOUT,
    config_keys=MappingProxyType(
        {
            **INKLING2.config_keys,
            "loop_input_layers": "loop_layer_index_start",
            "loop_end": "loop_layer_index_end",
            "loop_count": "loop_num_passes",
        }
    ),
)

RELATIVE_BIAS_FAMILIES = (INKLING, INKLING2, INKLING2_LOOP)
