"""Mixtures of experts whose layers are another family's with a mechanism or two changed (issue #39
item 3), each read from its modeling code in transformers 5.24 and written as a `replace()` of the
closest spec: what differs is named by what it does, never by the family (docs/moe.md).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.biased_routing_families import GLM4_MOE
from gqa_export.arch.expert_attention import AttentionExpertNames
from gqa_export.arch.families import _MOE, COHERE2, GRANITEMOE, OLMO2, QWEN3_MOE
from gqa_export.arch.mixer_spec import Multiplier
from gqa_export.arch.spec import (
    FUSED_EXPERTS,
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    ArchSpec,
    LayerNames,
    MoeNames,
    MoeSpec,
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
GRANITEMOE_SWA = replace(
    GRANITEMOESHARED, name="granitemoe_swa", attention_sinks="self_attn.sinks", refusals=()
)  # its sliding layers read sliding_window

# FlexOlmo: OLMo-2's layers (no input norm: attention -> RMSNorm -> add, MLP -> RMSNorm -> add, q/k
# RMSNorms over all heads) with OLMoE's sparse block in place of the MLP (mlp.gate: softmax over every
# expert, the top k renormalized iff norm_topk_prob), no clip_qkv (OLMo-2's attention)
FLEX_OLMO = replace(OLMO2, name="flex_olmo", moe=replace(_MOE, layer_rules=()))  # experts on every layer

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
    refusals=(),  # its sliding layers read sliding_window
    rope_layers="sliding_if_windowed",
    moe=replace(
        GLM4_MOE.moe,  # type: ignore[arg-type]
        names=replace(_GLM4_MOE_NAMES, expert_bias="gate.e_score_correction_bias|e_score_correction_bias"),
        layer_rules=("mlp_layer_types", "first_dense_layers"),  # its config fills the list from first_k_dense_replace
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
        ),
        layer_rules=(),  # experts on every layer
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
        layer_rules=(),  # experts on every layer
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
MINICPM5_MOE = replace(
    GLM4_MOE,
    name="minicpm5_moe",
    qk_norm=None,
    layer=LayerNames(),
    attention_output_gate=True,
    moe=replace(GLM4_MOE.moe, layer_rules=("mlp_layer_types", "first_dense_layers")),  # type: ignore[arg-type]
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
    refusals=(),  # its sliding layers read sliding_window
    qk_norm=None,
    layer=LayerNames(),
    attention_sinks="self_attn.sinks|self_attn.attention_sink_bias",
    attention_sink_layers="sliding",
    rope_partial_default=0.334,  # compute_default_rope_parameters' .get("partial_rotary_factor", 0.334)
    kv_heads_rule="doubled_on_sliding",
    multipliers=(Multiplier("self_attn.v_proj", "attention_value_scale"),),
    moe=replace(
        GLM4_MOE.moe,  # type: ignore[arg-type]
        names=replace(_GLM4_MOE_NAMES, shared_expert=None),
        layer_rules=("mlp_layer_types",),
    ),
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

# Mellum (transformers 5.25): Qwen3-MoE's layers (per-head q/k RMSNorms before RoPE, softmax over every
# expert, the top k renormalized iff norm_topk_prob) with Laguna's model around them: windows on the
# "sliding_attention" layers of layer_types, RoPE with a theta (and a rotated share) per layer type, the
# "dense" layers of mlp_layer_types an intermediate_size MLP; its multi-token-prediction layer (mtp.*) is
# not read, as transformers' class ignores it
MELLUM = replace(QWEN3_MOE, name="mellum", moe=replace(QWEN3_MOE.moe, layer_rules=("mlp_layer_types",)))  # type: ignore[arg-type]

DERIVED_MOE = (
    GRANITEMOESHARED, GRANITEMOE_SWA, FLEX_OLMO, COHERE2_MOE, EXAONE_MOE, DBRX, JETMOE, SARVAM_MOE, PARAM2MOE,
    MINICPM5_MOE, MIMO_V2_FLASH, QWEN3_VL_MOE, ARIA_TEXT, MELLUM,
)  # fmt: skip
