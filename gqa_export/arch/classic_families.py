"""Llama-shaped families and their mixtures of experts (issue #24), kept apart from families.py so
neither module grows past a screenful. Only what differs from the Llama defaults is written down;
the registry (arch/__init__.py) reads `CLASSIC` beside `families.ALL`."""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.families import HUNYUAN
from gqa_export.arch.spec import FUSED_EXPERTS, PER_EXPERT_PROJ, ArchSpec, LayerNames, MoeNames, MoeSpec, config_keys

_QK_NORMS = LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm")

# Seed-OSS: Llama with a head_dim decoupled from hidden / heads and q/k/v biases without an o_proj
# bias (attention_out_bias); both are read from the config and the checkpoint, so nothing to declare
SEED_OSS = ArchSpec(name="seed_oss")
# Arcee (AFM): Llama with a non-gated squared-ReLU MLP (up -> relu^2 -> down)
ARCEE = ArchSpec(name="arcee", mlp="plain", activations=("relu2",))

# GLM-4-MoE (GLM-4.5): pre-norm Llama layers with partial (rotate-half) RoPE, optional per-head q/k
# RMSNorms before RoPE (use_qk_norm, found in the checkpoint), dense MLPs on the first
# first_k_dense_replace layers, then experts routed by sigmoid scores chosen within the best expert
# groups on scores + e_score_correction_bias (routing "sigmoid_grouped") beside ungated shared
# experts n_shared_experts wide
GLM4_MOE = ArchSpec(
    name="glm4_moe",
    qk_norm="head",
    layer=_QK_NORMS,
    moe=MoeSpec(
        MoeNames(
            per_expert=(PER_EXPERT_PROJ,),
            fused=(FUSED_EXPERTS,),
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias",
        ),
        routing="sigmoid_grouped",
        shared_width="per_expert",
    ),
    config_keys=config_keys(
        num_experts="n_routed_experts|num_local_experts", first_dense_layers="first_k_dense_replace"
    ),
)

# ERNIE-4.5-MoE: ERNIE-4.5's layers (GPT-J RoPE, optional biases) with experts on layers
# moe_layer_start_index..moe_layer_end_index every moe_layer_interval, routed by softmax
# probabilities chosen on probs + e_score_correction_bias (routing "softmax_biased", always
# renormalized), beside ungated shared experts moe_num_shared_experts wide; the bias sits under
# mlp.moe_statics on the hub and mlp.gate.moe_statics in transformers 5.x
ERNIE4_5_MOE = ArchSpec(
    name="ernie4_5_moe",
    rope_interleaved=True,
    moe=MoeSpec(
        MoeNames(
            per_expert=(PER_EXPERT_PROJ,),
            fused=(FUSED_EXPERTS,),
            shared_expert="shared_experts",
            expert_bias="moe_statics.e_score_correction_bias|gate.moe_statics.e_score_correction_bias",
        ),
        routing="softmax_biased",
        normalize=True,
        shared_width="per_expert",
    ),
    config_keys=config_keys(
        first_dense_layers="moe_layer_start_index",
        decoder_sparse_step="moe_layer_interval",
        shared_experts="moe_num_shared_experts",
    ),
)

# HunYuan-MoE (Hunyuan-A13B): HunYuan dense's layers (per-head q/k RMSNorms after RoPE, NTK-alpha
# RoPE) with experts on every layer, routed by gate.wg (softmax over all experts, top k always
# renormalized), beside a gated shared_mlp; experts and shared_mlp both intermediate_size wide, as
# transformers builds them (a per-layer moe_topk list must hold one value; read as moe_topk, which
# transformers 4.x does not alias to num_experts_per_tok)
HUNYUAN_MOE = replace(
    HUNYUAN,
    name="hunyuan_v1_moe",
    moe=MoeSpec(
        MoeNames(
            routers=("gate.wg",), per_expert=(PER_EXPERT_PROJ,), fused=(FUSED_EXPERTS,), shared_expert="shared_mlp"
        ),
        normalize=True,
        shared_width="dense",
    ),
    config_keys=config_keys(expert_intermediate_size="intermediate_size", experts_per_token="moe_topk"),
)

CLASSIC = (SEED_OSS, ARCEE, GLM4_MOE, ERNIE4_5_MOE, HUNYUAN_MOE)
