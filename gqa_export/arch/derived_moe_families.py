"""Mixtures of experts whose layers are another family's with a mechanism or two changed (issue #39
item 3), each read from its modeling code in transformers 5.24 and written as a `replace()` of the
closest spec: what differs is named by what it does, never by the family (docs/moe.md).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.expert_attention import AttentionExpertNames
from gqa_export.arch.families import _MOE, COHERE2, GLM4_MOE, GRANITEMOE, OLMO2, OLMOE, QWEN3_MOE
from gqa_export.arch.mixer_spec import Multiplier
from gqa_export.arch.spec import (
    FUSED_EXPERTS,
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    ArchSpec,
    LayerNames,
    MoeNames,
    MoeSpec,
    Refusal,
    config_keys,
)

# GraniteMoE-Shared: GraniteMoE's multipliers and top-k-then-softmax router with a gated shared MLP
# beside the experts (shared_mlp.input_linear holds its gate | up halves, shared_intermediate_size
# wide: Granite-4.0-H's, whose graph already adds it), none where shared_intermediate_size is 0
_GRANITE_SHARED_MLP = ("shared_mlp.input_linear", "shared_mlp.output_linear")
GRANITEMOESHARED = replace(
    GRANITEMOE,
    name="granitemoeshared",
    moe=replace(GRANITEMOE.moe, names=replace(GRANITEMOE.moe.names, shared_mlp=_GRANITE_SHARED_MLP)),  # type: ignore[union-attr]
    config_keys=config_keys(shared_expert_intermediate_size="shared_intermediate_size"),
)

# GraniteMoE-SWA: GraniteMoE-Shared's layers (its shared MLP off where shared_intermediate_size is 0,
# the class's default) with GraniteSWA's attention: a per-head sink logit on every layer (GQA's head_sink),
# sliding layers from layer_types, a RoPE base per layer from layer_rope_theta (0: NoPE)
GRANITEMOE_SWA = replace(GRANITEMOESHARED, name="granitemoe_swa", attention_sinks="self_attn.sinks")

# FlexOlmo: OLMo-2's layers (no input norm: attention -> RMSNorm -> add, MLP -> RMSNorm -> add, q/k
# RMSNorms over all heads) with OLMoE's sparse block in place of the MLP (mlp.gate: softmax over every
# expert, the top k renormalized iff norm_topk_prob), no clip_qkv (OLMo-2's attention)
FLEX_OLMO = replace(OLMO2, name="flex_olmo", moe=_MOE)

# Cohere2-MoE: Cohere2's parallel layers (sliding layers with GPT-J RoPE, global ones without,
# logit_scale) whose norms are RMSNorms where the config sets rms_norm_eps (LayerNorms otherwise);
# Mixtral's experts intermediate_size wide on the "sparse" layers of mlp_layer_types, chosen as the
# top k of the logits and weighted by their softmax (= softmax top k renormalized) or, with
# expert_selection_fn "sigmoid", by their sigmoid (renormalized iff norm_topk_prob); shared experts
# num_shared_experts x intermediate_size wide summed with the routed output or averaged with it
# (shared_expert_combination_strategy); "dense" layers hold a prefix_dense_intermediate_size MLP and,
# when prefix_dense_sliding_window_pattern is 1, RoPE on their full attention (force_rope)
COHERE2_MOE = replace(
    COHERE2,
    name="cohere2_moe",
    rms_when_configured=True,
    rope_layers="sliding_or_dense_prefix",
    moe=MoeSpec(
        MoeNames(per_expert=(PER_EXPERT_PROJ, PER_EXPERT_W), shared_expert="shared_experts"),
        normalize=True,
        shared_width="per_expert",
        # expert_selection_fn: softmax of the top-k logits, or their sigmoid renormalized iff norm_topk_prob
        selections=MappingProxyType({"softmax": "softmax", "sigmoid": "sigmoid_topk"}),
    ),
    config_keys=config_keys(
        intermediate_size="prefix_dense_intermediate_size|intermediate_size", shared_experts="num_shared_experts"
    ),
)

# EXAONE-MoE (K-EXAONE): pre-norm layers (OLMoE's) with EXAONE-4's attention (per-head q/k RMSNorms
# before RoPE, global layers NoPE when the model has a window) and DeepSeek-V3's mixture as GLM-4-MoE
# runs it (sigmoid scores chosen within the best groups on scores + e_score_correction_bias, fp32,
# times routed_scaling_factor, shared experts num_shared_experts x moe_intermediate_size wide) on the
# "sparse" layers of mlp_layer_types; the hub keeps the selection bias at mlp.e_score_correction_bias
_GLM4_MOE_NAMES = GLM4_MOE.moe.names  # type: ignore[union-attr]
EXAONE_MOE = replace(
    GLM4_MOE,
    name="exaone_moe",
    rope_layers="sliding_if_windowed",
    moe=replace(
        GLM4_MOE.moe,  # type: ignore[arg-type]
        names=replace(_GLM4_MOE_NAMES, expert_bias="gate.e_score_correction_bias|e_score_correction_bias"),
    ),
    config_keys=config_keys(first_dense_layers="first_k_dense_replace", shared_experts="num_shared_experts"),
)

# DBRX: pre-norm layers of LayerNorms without bias (nn.LayerNorm's eps 1e-5, the config names none)
# under transformer.wte / blocks.{i} / norm_f, a fused Wqkv [q | k | v] clamped to +-clip_qkv, and
# experts stored as one [E*I, H] tensor per kind (w1 gate, v1 up, w2 down stored (in, out)) routed by
# softmax over every expert, the top k divided by their p-norm (moe_normalize_expert_weights: 1 is
# their sum, None none, others refused); the sizes and switches sit in attn_config / ffn_config
DBRX = ArchSpec(
    name="dbrx",
    embed="wte.weight",
    final_norm="norm_f.weight",
    layer_prefix="blocks.{i}.",
    layer=LayerNames(
        input_norm="norm_attn_norm.norm_1",
        post_attention_norm="norm_attn_norm.norm_2",
        qkv="norm_attn_norm.attn.Wqkv",
        o="norm_attn_norm.attn.out_proj",
    ),
    norm="layer",
    fixed_norm_eps=1e-5,
    moe=MoeSpec(
        MoeNames(
            blocks=("ffn.",),
            routers=("router.layer",),
            per_expert=(),
            fused=(),
            stacked_rows=("experts.mlp.w1", "experts.mlp.v1", "experts.mlp.w2"),
        )
    ),
    config_keys=config_keys(
        activation="ffn_config.ffn_act_fn.name",
        num_experts="ffn_config.moe_num_experts",
        experts_per_token="ffn_config.moe_top_k",
        expert_intermediate_size="ffn_config.ffn_hidden_size",
        norm_topk_prob="ffn_config.moe_normalize_expert_weights",
        clip_qkv="attn_config.clip_qkv",
    ),
    decoder_prefixes=("transformer.",),
)

# JetMoE: Llama's pre-norm RMSNorm layers (eps 1e-6: the layers' norms ignore rms_norm_eps)
# with a mixture of attention heads (arch/expert_attention.py: the top k of E query / output
# projection pairs over shared kv heads, computed densely, a bias after the output) and a mixture
# of experts in the MLP (GraniteMoE's fused input_linear / output_linear, top k then softmax, a bias
# after the experts), activation_function
_JETMOE_EXPERTS = AttentionExpertNames()
JETMOE = ArchSpec(
    name="jetmoe",
    layer=LayerNames(q="self_attention.q_proj", qkv=_JETMOE_EXPERTS.qkv, o=_JETMOE_EXPERTS.o),
    attention_experts=_JETMOE_EXPERTS,
    moe=MoeSpec(
        MoeNames(
            routers=("router.layer",),
            per_expert=(),
            fused=(("input_linear", "output_linear"),),
            output_bias="bias",
        ),
        normalize=True,
    ),
    config_keys=config_keys(activation="activation_function"),
    fixed_norm_eps=1e-6,  # the layers' norms; the final one reads rms_norm_eps (1e-6 in JetMoE's configs)
)

# Sarvam-MoE (sarvam-30b): transformers 5.24 runs it as Glm4MoeForCausalLM (per-head q/k RMSNorms
# before RoPE, dense first first_k_dense_replace layers, sigmoid scores chosen within the best groups on
# scores + the selection bias, fp32, times routed_scaling_factor, shared experts); only its config
# class (RoPE over the whole head by default: partial_rotary_factor 1.0; num_experts /
# num_shared_experts / use_qkv_bias through attribute_map) and the hub's tensor names differ: the
# Bailing layout, one stacked [q | k | v] query_key_value, attention.dense, query_layernorm /
# key_layernorm, word_embeddings, the selection bias at mlp.gate.expert_bias
SARVAM_MOE = replace(
    GLM4_MOE,
    name="sarvam_moe",
    embed="word_embeddings.weight",
    layer=LayerNames(
        qkv="attention.query_key_value",
        o="attention.dense",
        q_norm="attention.query_layernorm",
        k_norm="attention.key_layernorm",
    ),
    moe=replace(
        GLM4_MOE.moe,  # type: ignore[arg-type]
        names=replace(_GLM4_MOE_NAMES, expert_bias="gate.expert_bias|gate.e_score_correction_bias"),
    ),
)

# Param2-MoE (transformers 5.25): Sarvam-MoE's config class under another model_type (other defaults:
# tied embeddings, RoPE base 500000), run as Glm4MoeForCausalLM; transformers converts its hub tensors
# with Sarvam-MoE's mapping (conversion_mapping.py), so the hub's names are the Bailing layout too
PARAM2MOE = replace(SARVAM_MOE, name="param2moe")

# MiniCPM5-MoE (transformers 5.25): Llama's attention without q/k norms whose q_proj (the hub's name;
# transformers renames it q_gate_proj at load) holds each head's query and then its output gate, the
# attention output times sigmoid(gate) before o_proj (Qwen3.5's gate); RoPE over the whole head; DeepSeek-V3's
# grouped sigmoid router in fp32 (GLM-4-MoE's) with shared experts on the "sparse" layers of mlp_layer_types
MINICPM5_MOE = replace(GLM4_MOE, name="minicpm5_moe", qk_norm=None, layer=LayerNames(), attention_output_gate=True)

# MiniMax-M2: OLMoE's pre-norm layers (q/k RMSNorms over all heads, before RoPE) with RoPE on the
# first partial_rotary_factor of each head (the hub's rotary_dim, converted by the config class) and
# Mixtral's experts (the hub's block_sparse_moe.experts.{e}.w1/w2/w3, transformers 5.x's fused mlp.experts)
# chosen as the top k of sigmoid(logits) + e_score_correction_bias, weighted by the unbiased sigmoid
# renormalized by their sum (always; no routed_scaling_factor, whatever the config says). A config
# sliding_window is refused: the class attends to the whole prompt, but transformers' cache built from
# that config keeps only the last sliding_window keys when decoding, so no one function is HF's
MINIMAX_M2 = replace(
    OLMOE,
    name="minimax_m2",
    moe=MoeSpec(
        MoeNames(
            blocks=("block_sparse_moe.", "mlp."),
            per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ),
            expert_bias="e_score_correction_bias",
        ),
        routing="sigmoid_topk",
        normalize=True,
    ),
    refusals=(
        Refusal(
            "sliding_window",
            "MiniMax-M2 with a sliding_window is not supported: its attention reads the whole prompt while "
            "transformers' cache keeps only the last sliding_window keys when decoding; set it to null",
        ),
    ),
    ignore=("routed_scaling",),  # its router has no routed scaling
)

# AFMoE (Arcee Trinity): Gemma-2's sandwich of RMSNorms around attention and around the MLP, per-head
# q/k RMSNorms before RoPE, RoPE on the sliding layers only (the full ones NoPE: layer_types from
# global_attn_every_n_layers), the attention output times sigmoid(self_attn.gate_proj(x)) before
# o_proj, the embeddings times sqrt(hidden_size) when mup_enabled; dense first num_dense_layers
# layers, then experts (mlp.router.gate) chosen as the top k of sigmoid(logits) + mlp.expert_bias,
# weighted by the unbiased sigmoid over their sum (+1e-20, nothing in fp32) times route_scale, beside
# shared experts num_shared_experts x moe_intermediate_size wide
AFMOE = ArchSpec(
    name="afmoe",
    norm_layout="sandwich",
    qk_norm="head",
    rope_layers="sliding",
    embedding_scale="sqrt_hidden_if_configured",
    layer=LayerNames(
        pre_feedforward_norm="pre_mlp_layernorm",
        post_feedforward_norm="post_mlp_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        output_gate="self_attn.gate_proj",
    ),
    moe=MoeSpec(
        MoeNames(routers=("router.gate",), shared_expert="shared_experts", expert_bias="expert_bias"),
        routing="sigmoid_topk",
        normalize=True,
        shared_width="per_expert",
    ),
    config_keys=config_keys(routed_scaling="route_scale", shared_experts="num_shared_experts"),
)

# MiMo-V2-Flash: Llama's pre-norm layers (no q/k norms) whose attention differs by layer type: sliding
# layers (layer_types, sliding_window keys) have twice num_key_value_heads and a per-head sink logit
# (self_attn.sinks; attention_sink_bias on the hub), full ones neither; values v_head_dim wide beside
# head_dim-wide queries and keys (zero-padded in the cache), times attention_value_scale; RoPE on the
# first int(head_dim * partial_rotary_factor) channels of each head with a theta per layer type
# (rope_parameters by type); DeepSeek-V3's sigmoid grouped router as GLM-4-MoE runs it without shared
# experts, on the "sparse" layers of mlp_layer_types (the config fills it: dense first)
MIMO_V2_FLASH = replace(
    GLM4_MOE,
    name="mimo_v2_flash",
    qk_norm=None,
    layer=LayerNames(),
    attention_sinks="self_attn.sinks|self_attn.attention_sink_bias",
    attention_sink_layers="sliding",
    rope_partial_default=0.334,  # compute_default_rope_parameters' .get("partial_rotary_factor", 0.334)
    kv_heads_rule="doubled_on_sliding",
    multipliers=(Multiplier("self_attn.v_proj", "attention_value_scale"),),
    moe=replace(GLM4_MOE.moe, names=replace(_GLM4_MOE_NAMES, shared_expert=None)),  # type: ignore[arg-type]
    config_keys=config_keys(num_experts="n_routed_experts", value_head_dim="v_head_dim"),
)

# Qwen3-VL-MoE's text decoder (Qwen3-VL-30B-A3B, 235B-A22B): Qwen3-MoE's layers whose router always
# renormalizes its top k (Qwen3VLMoeTextTopKRouter has no norm_topk_prob) and whose experts the hub
# stores fused and transposed, experts.gate_up_proj [E, H, 2I] = [gate | up] along the last axis and
# experts.down_proj [E, I, H] (Llama-4's layout), while transformers 5.x transposes both on load and
# saves them as it holds them ([E, 2I, H], [E, H, I]): the shape tells which. M-RoPE (interleaved)
# and the deepstack adds come from the multimodal plan, as for Qwen3-VL's decoder
# (docs/multimodal.md §11.3, §11.5)
QWEN3_VL_MOE = replace(
    QWEN3_MOE,
    name="qwen3_vl_moe",
    moe=replace(
        _MOE,
        names=replace(_MOE.names, per_expert=(), fused=(FUSED_EXPERTS,), fused_or_transposed=True),
        normalize=True,
    ),
)

# MiniMax-M3's text decoder (minimax_m3_vl_text, transformers 5.25): Qwen3-MoE's pre-norm layers with
# Gemma's RMSNorms (weight + 1) everywhere, per-head q/k norms before RoPE, RoPE on rotary_dim channels
# of each head (the class rotates all of them: hf_rotates_full_head, as MiniMax); dense layers where
# mlp_layer_types says "dense" (a packed mlp.gate_up_proj, dense_intermediate_size wide), experts
# elsewhere: MiniMax-M2's router (the top k of sigmoid + e_score_correction_bias, weighted by the unbiased
# sigmoid over their sum) times routed_scaling_factor, beside a shared expert; experts, shared expert and
# dense MLPs all compute gpt-oss's clamped SwiGLU (gate * sigmoid(alpha gate) * (up + 1)) on [gate | up]
# halves. Its "minimax_m3_sparse" layers add a block-sparse indexer that keeps every key while the keys
# fit in index_topk_blocks blocks of index_block_size: the package is plain attention, its context capped
# there (model/sparse_cap.py; the indexer's weights are not read)
MINIMAX_M3 = ArchSpec(
    name="minimax_m3_vl_text",
    qk_norm="head",
    norm_offset=1.0,
    hf_rotates_full_head=True,
    layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm", gate_up="mlp.gate_up_proj"),
    layer_type_names=MappingProxyType({"minimax_m3_sparse": "full_attention"}),
    block_sparse_type="minimax_m3_sparse",
    moe=MoeSpec(
        MoeNames(
            blocks=("mlp.", "block_sparse_moe."),
            per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ),
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias|e_score_correction_bias",
        ),
        routing="sigmoid_topk",
        normalize=True,
        activation="swiglu_clamped",
    ),
    config_keys=config_keys(
        intermediate_size="dense_intermediate_size",
        expert_intermediate_size="intermediate_size",
        shared_expert_intermediate_size="shared_intermediate_size",
    ),
)

# Aria's text decoder (aria_text, transformers 5.25): Llama's layers whose MLP is a mixture. The router
# mlp.router is a bare [E, H] weight; the top k of its logits are weighted by their softmax (= the softmax
# over every expert, top k renormalized); the experts are stored as the layout grouped_mm takes,
# [gate | up] halves [E, H, 2I] and down [E, I, H] (Llama-4's), as experts.fc1/fc2.weight by the hub and
# transformers' default save and as experts.gate_up_proj/down_proj by its own layout, always SiLU-gated;
# shared experts moe_num_shared_experts x intermediate_size wide (Llama's MLP, the config's hidden_act) added
# to every token's routed output
ARIA_TEXT = ArchSpec(
    name="aria_text",
    moe=MoeSpec(
        MoeNames(
            routers=("router",),
            per_expert=(),
            fused=(),
            transposed=("experts.gate_up_proj", "experts.down_proj"),
            transposed_order="halves",
            shared_expert="shared_experts",
        ),
        normalize=True,
        shared_width="per_expert",
    ),
    tensor_aliases=(
        ("mlp.experts.gate_up_proj", "mlp.experts.fc1.weight"),
        ("mlp.experts.down_proj", "mlp.experts.fc2.weight"),
    ),
    config_keys=config_keys(
        num_experts="moe_num_experts", experts_per_token="moe_topk", shared_experts="moe_num_shared_experts"
    ),
)

# Laguna (transformers 5.25): Llama's pre-norm layers with AFMoE's attention (per-head q/k RMSNorms
# before RoPE, windows on the "sliding_attention" layers) whose output is gated by softplus(self_attn.g_proj(x))
# instead of a sigmoid, one gate per head (gating true / "per-head": g_proj [Nq, H]) or per channel
# ("per-element": [Nq*D, H]); each layer's query heads from num_attention_heads_per_layer (one kv-head
# count); RoPE with a theta and a rotated share per layer type (rope_parameters by type). "dense" layers of
# mlp_layer_types hold an intermediate_size MLP, "sparse" ones experts chosen as the top k of
# sigmoid(logits) + mlp.gate.e_score_correction_bias (the hub's mlp.experts.e_score_correction_bias),
# weighted by the unbiased sigmoid over their sum, times moe_routed_scaling_factor, the logits first
# softcapped (c tanh(logits / c)) where moe_router_logit_softcapping is set, beside an ungated-sum shared
# expert shared_expert_intermediate_size wide (the hub's mlp.shared_expert, 5.x's mlp.shared_experts)
LAGUNA = ArchSpec(
    name="laguna",
    qk_norm="head",
    layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm", output_gate="self_attn.g_proj"),
    output_gate_activation="softplus",
    moe=MoeSpec(
        MoeNames(
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias|experts.e_score_correction_bias",
        ),
        routing="sigmoid_topk",
        normalize=True,
    ),
    tensor_aliases=(("mlp.shared_experts.", "mlp.shared_expert."),),
    config_keys=config_keys(routed_scaling="moe_routed_scaling_factor"),
)

# Mellum (transformers 5.25): Qwen3-MoE's layers (per-head q/k RMSNorms before RoPE, softmax over every
# expert, the top k renormalized iff norm_topk_prob) with Laguna's model around them: windows on the
# "sliding_attention" layers of layer_types, RoPE with a theta (and a rotated share) per layer type, the
# "dense" layers of mlp_layer_types an intermediate_size MLP; its multi-token-prediction layer (mtp.*) is
# not read, as transformers' class ignores it
MELLUM = replace(QWEN3_MOE, name="mellum")

# Flint (transformers 5.25): Qwen3-MoE's attention (per-head q/k RMSNorms before RoPE) with gpt-oss's
# per-head sink logit (self_attn.sinks; the hub's self_attn.softmax_offset) and RoPE on the
# "sliding_attention" layers only (the full ones NoPE); experts chosen as the top k of sigmoid(logits), no
# selection bias, renormalized iff norm_topk_prob, the router in fp32 (its weight kept fp32), beside a
# shared expert shared_expert_intermediate_size wide summed without a gate (the hub's mlp.shared_expert);
# mlp_only_layers / decoder_sparse_step dense layers as Qwen-MoE's. The sinks need GroupQueryAttention
FLINT = replace(
    QWEN3_MOE,
    name="flint",
    rope_layers="sliding",
    attention_sinks="self_attn.sinks|self_attn.softmax_offset",
    moe=MoeSpec(MoeNames(shared_expert="shared_expert"), routing="sigmoid_topk", router_dtype="float32"),
)

# HY-V3 (Hy3, transformers 5.25): Qwen3's attention (per-head q/k RMSNorms before RoPE, Apertus' class),
# Llama's pre-norm layers with a dense SwiGLU MLP where mlp_layer_types says "dense" (the class fills the
# list: layer 0 dense), and experts chosen as the top k of sigmoid(logits) + the selection bias, weighted by
# the unbiased sigmoid over their sum (+1e-20, always), times router_scaling_factor; the router's weight and
# logits in fp32; shared experts num_shared_experts x moe_intermediate_size wide added to the routed sum (in
# fp32 where enable_moe_fp32_combine: the same in an fp32 package). The hub names: mlp.router.gate,
# mlp.expert_bias, mlp.shared_mlp (transformers renames them mlp.gate, mlp.e_score_correction_bias,
# mlp.shared_experts at load); its multi-token-prediction layer past num_hidden_layers is not read
HY_V3 = replace(
    QWEN3_MOE,
    name="hy_v3",
    moe=MoeSpec(
        MoeNames(shared_expert="shared_experts", expert_bias="e_score_correction_bias"),
        routing="sigmoid_topk",
        normalize=True,
        shared_width="per_expert",
        router_dtype="float32",
    ),
    tensor_aliases=(
        ("mlp.gate.", "mlp.router.gate."),
        ("mlp.e_score_correction_bias", "mlp.expert_bias"),
        ("mlp.shared_experts.", "mlp.shared_mlp."),
    ),
    config_keys=config_keys(routed_scaling="router_scaling_factor", shared_experts="num_shared_experts"),
)

# Kolibri-1 (transformers 5.25): EXAONE-4's attention (per-head q/k RMSNorms before rotate-half RoPE,
# RoPE on the sliding layers only when the model has a window, the full ones NoPE; layer_types: every fifth
# full) in GLM-4's sandwich of four RMSNorms, and on every layer Qwen3-MoE's experts beside a shared
# expert shared_expert_intermediate_size wide (DeepseekV3MoE's sum), routed by the top k of the fp32
# logits + e_score_correction_bias, weighted by the sigmoid of their logits, renormalized iff
# norm_topk_prob, no scaling. The hub spells post_attn_norm, post_ffn_norm and moe.router.expert_bias
# (transformers renames them at load)
KOLIBRI1 = ArchSpec(
    name="kolibri1",
    norm_layout="sandwich",
    qk_norm="head",
    rope_layers="sliding_if_windowed",
    layer=LayerNames(
        post_attention_norm="post_self_attn_layernorm",
        pre_feedforward_norm="post_attention_layernorm",
        post_feedforward_norm="post_mlp_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
    ),
    moe=MoeSpec(
        MoeNames(shared_expert="shared_experts", expert_bias="gate.e_score_correction_bias"),
        routing="sigmoid_logits_biased",
        router_dtype="float32",
    ),
    tensor_aliases=(
        ("post_self_attn_layernorm.", "post_attn_norm."),
        ("post_mlp_layernorm.", "post_ffn_norm."),
        ("mlp.gate.e_score_correction_bias", "moe.router.expert_bias"),
    ),
)

DERIVED_MOE = (
    GRANITEMOESHARED, GRANITEMOE_SWA, FLEX_OLMO, COHERE2_MOE, EXAONE_MOE, DBRX, JETMOE, SARVAM_MOE, PARAM2MOE,
    MINICPM5_MOE, MINIMAX_M2, AFMOE, MIMO_V2_FLASH, QWEN3_VL_MOE, MINIMAX_M3, ARIA_TEXT, LAGUNA, MELLUM, FLINT, HY_V3,
    KOLIBRI1,
)  # fmt: skip
