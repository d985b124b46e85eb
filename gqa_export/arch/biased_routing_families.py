"""Mixtures of experts that route on biased or grouped scores beside shared experts (GLM-4-MoE, dots.llm1,
ERNIE-4.5-MoE) or renormalize a softmax top k beside a gated shared MLP (HunYuan-MoE): families whose layers
are a dense family's of families.py (docs/moe.md)."""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.families import _QK_NORMS, HUNYUAN
from gqa_export.arch.spec import (
    FUSED_EXPERTS,
    PER_EXPERT_PROJ,
    STRAY_WINDOW,
    ArchSpec,
    MoeNames,
    MoeSpec,
    config_keys,
)

# GLM-4-MoE (GLM-4.5): pre-norm Llama layers with partial (rotate-half) RoPE, optional per-head q/k
# RMSNorms before RoPE (use_qk_norm, found in the checkpoint), dense MLPs on the first
# first_k_dense_replace layers, then experts routed by sigmoid scores chosen within the best expert
# groups on scores + e_score_correction_bias (routing "sigmoid_group_biased", graph/grouped_routing.py)
# beside ungated shared experts n_shared_experts wide
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
        routing="sigmoid_group_biased",
        shared_width="per_expert",
        router_dtype="float32",  # F.linear(x.float(), W.float()), weight and bias kept fp32
        layer_rules=("first_dense_layers",),
    ),
    config_keys=config_keys(
        num_experts="n_routed_experts|num_local_experts", first_dense_layers="first_k_dense_replace"
    ),
    refusals=(STRAY_WINDOW,),
)

# dots.llm1 (dots1): Qwen3's attention (per-head q/k RMSNorms, full RoPE, per-layer windows from
# layer_types) with GLM-4-MoE's / DeepSeek-V3's mixture: dense first first_k_dense_replace layers,
# then sigmoid routing within the best groups on scores + e_score_correction_bias, shared experts
DOTS1 = replace(GLM4_MOE, name="dots1", refusals=())  # Qwen3's attention: windows by layer_types

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
        router_dtype="float32",  # F.linear(x.float(), W.float()) with autocast off
        layer_rules=("first_dense_layers", "last_sparse_layer", "decoder_sparse_step"),
    ),
    config_keys=config_keys(
        first_dense_layers="moe_layer_start_index",
        decoder_sparse_step="moe_layer_interval",
        shared_experts="moe_num_shared_experts",
    ),
    refusals=(STRAY_WINDOW,),
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
        router_dtype="float32",  # gate.wg is declared fp32 and reads x.float(); the op picks on its logits
        layer_rules=(),
    ),
    config_keys=config_keys(expert_intermediate_size="intermediate_size", experts_per_token="moe_topk"),
    refusals=(STRAY_WINDOW,),
)

BIASED_ROUTED = (GLM4_MOE, ERNIE4_5_MOE, HUNYUAN_MOE, DOTS1)
