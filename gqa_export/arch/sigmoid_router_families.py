"""Mixtures of experts whose router chooses on sigmoid scores (plus a selection bias where the
family has one) rather than a softmax: MiniMax-M2 and -M3, AFMoE, Laguna, Flint, HY-V3, Kolibri-1, Beam.
Each is a `replace()` of its closest spec or a spec of its own; the routing mechanisms are named in
`MoeSpec.routing` (docs/moe.md).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.biased_routing_families import GLM4_MOE
from gqa_export.arch.families import OLMOE, QWEN3_MOE
from gqa_export.arch.spec import (
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    ArchSpec,
    LayerNames,
    MoeNames,
    MoeSpec,
    Refusal,
    config_keys,
)

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
        layer_rules=(),  # experts on every layer, whatever mlp_only_layers / decoder_sparse_step a config carries
    ),
    refusals=(
        Refusal(
            "sliding_window",
            "MiniMax-M2 with a sliding_window is not supported: its attention reads the whole prompt while "
            "transformers' cache keeps only the last sliding_window keys when decoding; set it to null",
        ),
    ),
    ignore=("routed_scaling", "clip_qkv"),  # its router has no routed scaling, its attention no clamp (OLMoE's)
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
        layer_rules=("first_dense_layers",),
    ),
    config_keys=config_keys(routed_scaling="route_scale", shared_experts="num_shared_experts"),
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
    moe=MoeSpec(
        MoeNames(shared_expert="shared_expert"),
        routing="sigmoid_topk",
        router_dtype="float32",
        layer_rules=("decoder_sparse_step", "mlp_only_layers"),
    ),
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

# Beam-1.0 (transformers 5.25): AFMoE's attention and sandwich (Gemma's four RMSNorms, weight w, per-head q/k
# RMSNorms before RoPE, the output times sigmoid(self_attn.gate_proj(x) + self_attn.gate_bias), one gate per
# channel and one bias per head) with RoPE on the layer types whose rope_parameters entry is not null (the
# sliding ones) and the others NoPE, their queries times (1 + (pos + 1) / 2048) ** 0.1 after the q norm
# (a scalable softmax); each add depth-scaled (block / sqrt(k) + residual * sqrt((k - 1) / k), k = 2(i + 1)
# after attention, + 1 after the MLP); the "dense" layers of mlp_layer_types a SwiGLU MLP, the others
# DeepSeek-V3's grouped sigmoid router in fp32 (GLM-4-MoE's, no shared experts), times
# routed_scaling_factor after the expert sum (the same sum); SwiGLU products in fp32 (the same in an fp32
# package); the final logits soft-capped (final_logit_softcapping)
BEAM = replace(
    AFMOE,
    name="beam",
    rope_layers="typed",
    embedding_scale="none",
    nope_query_power=(0.1, 2048),
    residual_scale="add_index",
    layer=replace(
        AFMOE.layer,
        pre_feedforward_norm="pre_feedforward_layernorm",
        post_feedforward_norm="post_feedforward_layernorm",
        output_gate_bias="self_attn.gate_bias",
    ),
    moe=replace(
        GLM4_MOE.moe,  # type: ignore[arg-type]
        names=replace(GLM4_MOE.moe.names, shared_expert=None),  # type: ignore[union-attr]
        layer_rules=("mlp_layer_types", "first_dense_layers"),
    ),
    config_keys=config_keys(),
)

# Ergo (transformers 5.25): Gemma's sandwich of four RMSNorms (weight w, fp32), a fused self_attn.qkv_proj
# ([q | k | v] heads), per-head q/k RMSNorms before GPT-J's interleaved RoPE on the layer types whose
# rope_parameters entry is not null (the sliding ones) and the others NoPE, their logits times
# global_attention_scale where set (queries and keys each times its square root); each residual add through a
# learned per-channel gate, sigmoid(w) x block + sqrt(1 + sigmoid(w)) exp(-softplus(w) / 2) x residual
# (graph/learned_residual_gate.py); the "dense" layers of mlp_layer_types an ungated squared-ReLU MLP
# first_dense_intermediate_size wide, the others ungated squared-ReLU experts chosen as the top k of
# sigmoid(logits) + the selection bias (router in fp32, its weight mlp.gate.linear), weighted by the unbiased
# sigmoid over their sum (+1e-20) times moe_routed_scaling_factor, each expert's output through its own
# learned RMSNorm before the weighted sum (graph/normed_experts.py), beside a shared expert whose output
# passes its own RMSNorm. Transformers' save layout, or the hub's serving layout (tok_embeddings,
# attention.wqkv, a router gate_kernel [H, E]) read through transformers' renames (source/stored_renames.py)
_ERGO_SERVING_LAYOUT = (  # transformers' conversion mapping for ergo, in its order
    (r"^tok_embeddings\.", "model.embed_tokens.", False),
    (r"^norm\.", "model.norm.", False),
    (r"^output\.", "lm_head.", False),
    (r"^layers\.", "model.layers.", False),
    (r"\.attention_norm\.", ".input_layernorm.", False),
    (r"\.post_attention_norm\.", ".post_attention_layernorm.", False),
    (r"\.ffn_norm\.", ".pre_feedforward_layernorm.", False),
    (r"\.post_ffn_norm\.", ".post_feedforward_layernorm.", False),
    (r"\.post_attention_residual\.scale", ".attention_residual_gate.weight", False),
    (r"\.post_ffn_residual\.scale", ".feedforward_residual_gate.weight", False),
    (r"\.attention\.wqkv\.", ".self_attn.qkv_proj.", False),
    (r"\.attention\.wo\.", ".self_attn.o_proj.", False),
    (r"\.attention\.q_norm\.", ".self_attn.q_norm.", False),
    (r"\.attention\.k_norm\.", ".self_attn.k_norm.", False),
    (r"\.feed_forward\.up\.", ".mlp.up_proj.", False),
    (r"\.feed_forward\.down\.", ".mlp.down_proj.", False),
    (r"\.feed_forward\.gate_kernel$", ".mlp.gate.linear.weight", True),  # stored [H, E]
    (r"\.feed_forward\.router_bias$", ".mlp.gate.e_score_correction_bias", False),
    (r"\.feed_forward\.up_proj$", ".mlp.experts.up_proj", False),
    (r"\.feed_forward\.down_proj$", ".mlp.experts.down_proj", False),
    (r"\.feed_forward\.expert_output_norm\.scale$", ".mlp.experts.post_expert_norm.weight", False),
    (r"\.feed_forward\.shared_up_proj$", ".mlp.shared_experts.up_proj.weight", True),  # stored (in, out)
    (r"\.feed_forward\.shared_down_proj$", ".mlp.shared_experts.down_proj.weight", True),
    (r"\.feed_forward\.shared_expert_output_norm\.scale$", ".mlp.shared_experts.norm.weight", False),
)
ERGO = ArchSpec(
    name="ergo",
    norm_layout="sandwich",
    qk_norm="head",
    rope_layers="typed",
    rope_interleaved=True,
    mlp="plain",
    activations=("relu2",),
    layer=LayerNames(
        qkv="self_attn.qkv_proj",
        pre_feedforward_norm="pre_feedforward_layernorm",
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        residual_gates=("attention_residual_gate", "feedforward_residual_gate"),
    ),
    moe=MoeSpec(
        MoeNames(
            routers=("gate.linear",),
            per_expert=(),
            fused=(),
            ungated=(("experts.up_proj", "experts.down_proj"),),
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias",
            expert_norm="experts.post_expert_norm",
            shared_expert_norm="norm",
        ),
        routing="sigmoid_topk",
        normalize=True,
        activation="ungated",
        router_dtype="float32",
    ),
    stored_renames=_ERGO_SERVING_LAYOUT,
    score_scale="global_attention_scale",
    score_scale_layers="full",
    config_keys=config_keys(
        routed_scaling="moe_routed_scaling_factor",
        intermediate_size="first_dense_intermediate_size",
        shared_expert_intermediate_size="shared_intermediate_size",
        sliding_window="sliding_window|local_attention_window",
    ),
)

SIGMOID_ROUTED = (MINIMAX_M2, AFMOE, MINIMAX_M3, LAGUNA, FLINT, HY_V3, KOLIBRI1, BEAM, ERGO)
