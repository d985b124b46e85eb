"""One spec per hybrid family: decoders whose layers carry a fixed-size recurrent state (a short
convolution, gated DeltaNet, Mamba2, Mamba or lightning attention) beside or instead of
attention's KV cache (docs/hybrid-state.md). Only what differs from the Llama defaults is written
down."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.families import MIXTRAL, OLMO2
from gqa_export.arch.latent_families import DEEPSEEK_V3
from gqa_export.arch.mamba_hybrid_families import FALCON_H1, GRANITEMOEHYBRID, JAMBA, NEMOTRON_H
from gqa_export.arch.mixer_spec import GatedDeltaNetNames, MixerSpec
from gqa_export.arch.spec import (
    FUSED_EXPERTS,
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    ArchSpec,
    LatentAttentionNames,
    LayerNames,
    MoeNames,
    MoeSpec,
    Refusal,
    config_keys,
)
from gqa_export.arch.stream_spec import HyperConnectionNames, NormedResidualKeys

# LFM2: gated short-convolution layers (conv state instead of a KV cache) between GQA layers with
# per-head q/k RMSNorm before RoPE; the final norm is stored as `embedding_norm`; the MLP width
# follows block_auto_adjust_ff_dim.
LFM2 = ArchSpec(
    name="lfm2",
    final_norm="embedding_norm.weight",
    qk_norm="head",
    layer=LayerNames(
        input_norm="operator_norm",
        post_attention_norm="ffn_norm",
        o="self_attn.out_proj",
        q_norm="self_attn.q_layernorm",
        k_norm="self_attn.k_layernorm",
        gate="feed_forward.w1",
        up="feed_forward.w3",
        down="feed_forward.w2",
    ),
    mixers=MixerSpec(kinds=MappingProxyType({"conv": "short_conv"})),
    ffn_size="two_thirds_rounded",
)
# LFM3: LFM2's short-convolution layers between Qwen3-style attention layers (q_proj ... o_proj, per-head
# q/k RMSNorms q_norm / k_norm before RoPE), full and sliding ones by layer_types with a rope per layer type
# (full: proportional, partial), an RMSNorm on each block's output before the add where use_sandwich_norm
# says so, each head's output times sigmoid of its own gate value (self_attn.gate_proj [Nq, H] on the hub,
# g_proj in transformers 5.x) where use_attention_gate built one, the MLP intermediate_size wide
LFM3 = replace(
    LFM2,
    name="lfm3",
    norm_layout="sandwich",
    post_norms_switch=True,
    layer=LayerNames(
        input_norm="operator_norm",
        post_attention_norm="post_operator_norm",
        pre_feedforward_norm="ffn_norm",
        post_feedforward_norm="post_ffn_norm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        gate="feed_forward.w1",
        up="feed_forward.w3",
        down="feed_forward.w2",
        output_gate="self_attn.gate_proj",
    ),
    tensor_aliases=(("self_attn.gate_proj", "self_attn.g_proj"),),
    ffn_size="config",
    config_keys=config_keys(post_norms="use_sandwich_norm"),
)
# Qwen3.5: gated-DeltaNet layers (conv + recurrent state) between gated GQA layers (q_proj holds
# a sigmoid output gate per head, per-head q/k norms, partial RoPE); every RMSNorm but the
# DeltaNet's gated one is (1 + w) (docs/hybrid-state.md §5).
QWEN3_5 = ArchSpec(
    name="qwen3_5",
    qk_norm="head",
    norm_offset=1.0,
    layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"),
    mixers=MixerSpec(kinds=MappingProxyType({"linear_attention": "gated_deltanet"})),
    attention_output_gate=True,
)
# LFM2-MoE: LFM2's layers with sparse blocks after the first num_dense_layers: a sigmoid router
# whose expert_bias only steers the choice, experts per expert on the hub (w1/w3/w2) or fused
LFM2_MOE = replace(
    LFM2,
    name="lfm2_moe",
    moe=MoeSpec(
        names=MoeNames(
            blocks=("feed_forward.",),
            per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ),
            fused=(FUSED_EXPERTS,),
            expert_bias="expert_bias",
        ),
        routing="sigmoid_biased",
        layer_rules=("first_dense_layers",),
    ),
)
# Qwen3.5-MoE's text decoder: Qwen3.5's layers with a sparse block on every layer (softmax top-k,
# always renormalized) plus Qwen2-MoE's sigmoid-gated shared expert
QWEN3_5_MOE = replace(
    QWEN3_5,
    name="qwen3_5_moe",
    moe=MoeSpec(
        MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate"), normalize=True, layer_rules=()
    ),
)
# Qwen3-Next: Qwen3.5-MoE's layers (the same gated DeltaNet, gated GQA and (1 + w) norms) with
# the DeltaNet's projections fused per key head (in_proj_qkvz, in_proj_ba), a sparse block on the
# decoder_sparse_step grid outside mlp_only_layers (dense MLPs there), renormalized top-k only when
# norm_topk_prob says so (docs/hybrid-state.md §8.5)
QWEN3_NEXT = replace(
    QWEN3_5_MOE,
    name="qwen3_next",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "gated_deltanet"}),
        gated_deltanet=GatedDeltaNetNames(qkvz="linear_attn.in_proj_qkvz", ba="linear_attn.in_proj_ba"),
    ),
    moe=MoeSpec(
        MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate"),
        layer_rules=("decoder_sparse_step", "mlp_only_layers"),
    ),
)
# Lara-Mini (transformers 5.25): Qwen3.5's layers (gated-DeltaNet "linear_attention" layers between
# attention ones) with plain w * rms(x) RMSNorms (Helium's, no 1 + w), Qwen3's attention without an output
# gate (per-head q/k norms, windows on the "sliding_attention" layers) and RoPE over the whole head on the
# sliding layers only (full ones NoPE); softmax experts on every layer (fp32 router, top k renormalized iff
# norm_topk_prob) beside a shared expert summed without a gate. The hub stacks the DeltaNet's input
# projections into one in_proj (rows q | k | v | z | b | a) and names its gated norm out_norm
LARA_MINI = replace(
    QWEN3_5,
    name="lara_mini",
    norm_offset=0.0,
    default_rope_whole_head=True,
    attention_output_gate=False,
    rope_layers="sliding",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "gated_deltanet"}),
        gated_deltanet=GatedDeltaNetNames(stacked="linear_attn.in_proj"),
    ),
    moe=MoeSpec(MoeNames(shared_expert="shared_expert"), router_dtype="float32"),
    tensor_aliases=(("linear_attn.norm.", "linear_attn.out_norm."),),
)
# OLMo-Hybrid: OLMo-3's post-norm attention layers (full-width q/k norms, no window) between
# Llama-style pre-norm layers whose mixer is Qwen3.5's gated DeltaNet with separate q/k/v
# projections, a g_proj output gate, beta = 2 sigmoid(b) when linear_allow_neg_eigval, and an
# o_norm of eps 1e-5; RoPE only where rope_parameters hold a rope_theta (the released checkpoints
# have none: NoPE). Names as the hub (and save_pretrained) spell them: the DeltaNet layers' input
# norm attention_layer_norm, every post-attention norm feedforward_layer_norm, the conv kernel
# per q / k / v (docs/hybrid-state.md §8.14)
_OLMO_HYBRID_DELTANET = GatedDeltaNetNames(
    qkv="linear_attn.qkv_proj",  # the graph's name for the concatenated q | k | v weight
    qkv_parts=("linear_attn.q_proj", "linear_attn.k_proj", "linear_attn.v_proj"),
    conv_parts=("linear_attn.q_conv1d", "linear_attn.k_conv1d", "linear_attn.v_conv1d"),
    z="linear_attn.g_proj",
    b="linear_attn.b_proj",
    a="linear_attn.a_proj",
    norm="linear_attn.o_norm",
    out_proj="linear_attn.o_proj",
    norm_eps=1e-5,
)
OLMO_HYBRID = replace(
    OLMO2,
    name="olmo_hybrid",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "gated_deltanet"}),
        gated_deltanet=_OLMO_HYBRID_DELTANET,
        neg_eigval=True,
        state_input_norm="attention_layer_norm",
    ),
    layer=replace(OLMO2.layer, post_attention_norm="feedforward_layer_norm"),
    rope_layers="if_theta",
)
# MiniMax (MiniMax-Text-01, MiniMax-M1): lightning-attention layers (linear attention whose
# [H, d, d] state decays by a fixed rate per head and layer, an output gate and an RMSNorm over
# all heads) between GQA layers with RoPE, Mixtral's experts on every layer; each block adds to
# its own normed input, both scaled by the config's alpha / beta of its kind (docs/hybrid-state.md
# §8.16). transformers numbers a full-attention layer's window from config.sliding_window, which
# the layer types do not mark: refused
MINIMAX = replace(
    MIXTRAL,
    name="minimax",
    mixers=MixerSpec(kinds=MappingProxyType({"linear_attention": "lightning"})),
    normed_residual=NormedResidualKeys(),
    hf_rotates_full_head=True,  # its config keeps the released rotary_dim as an opaque attribute
    refusals=(
        Refusal(
            "sliding_window",
            "MiniMax with a sliding_window is not exported: its attention layers would slide while "
            "layer_types marks them full_attention",
        ),
    ),
)
# Kimi-Linear: KDA layers (Kimi Delta Attention: the gated DeltaNet with separate q/k/v projections and
# conv kernels, its decay per key channel from a low-rank f_a/f_b pair, A_log per head, a sigmoid-gated
# o_norm behind a low-rank g_a/g_b gate) between DeepSeek-V3's latent attention layers without any RoPE
# (transformers' KimiLinearAttention: NoPE, scale (qk_nope + qk_rope)^-0.5), dense MLPs where
# mlp_layer_types says "dense", else DeepSeek-V3's grouped biased-sigmoid router, shared experts. Names as
# the hub spells them: the mixers under self_attn, the sparse block block_sparse_moe with per-expert
# w1/w3/w2, the dense MLP mlp (docs/hybrid-state.md §8.17)
_KDA = GatedDeltaNetNames(
    qkv="self_attn.qkv_proj",  # the graph's name for the concatenated q | k | v weight
    qkv_parts=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    conv="self_attn.conv1d",
    conv_parts=("self_attn.q_conv1d", "self_attn.k_conv1d", "self_attn.v_conv1d"),
    z="self_attn.g_proj",  # the graph's names for the low-rank products
    z_parts=("self_attn.g_a_proj", "self_attn.g_b_proj"),
    a="self_attn.f_proj",
    a_parts=("self_attn.f_a_proj", "self_attn.f_b_proj"),
    b="self_attn.b_proj",
    a_log="self_attn.A_log",
    dt_bias="self_attn.dt_bias",
    norm="self_attn.o_norm",
    out_proj="self_attn.o_proj",
    decay="per_channel",
    gate="sigmoid",
)
KIMI_LINEAR = replace(
    DEEPSEEK_V3,
    name="kimi_linear",
    rope_interleaved=False,
    rope_layers="none",
    mixers=MixerSpec(kinds=MappingProxyType({"linear_attention": "gated_deltanet"}), gated_deltanet=_KDA),
    moe=replace(
        DEEPSEEK_V3.moe,  # type: ignore[arg-type]
        names=MoeNames(
            blocks=("block_sparse_moe.", "mlp."),
            per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ),
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias",
        ),
        layer_rules=("mlp_layer_types",),
    ),
    # transformers 5.x's own layout nests the forget gate; its save_pretrained puts the dense MLP beside the
    # experts (the conv kernel stored whole there is read as such, graph/recurrent_state.py)
    tensor_aliases=(
        *((f"self_attn.{m}", f"self_attn.forget_gate.{m}") for m in ("f_a_proj", "f_b_proj", "A_log", "dt_bias")),
        *((f"mlp.{m}", f"block_sparse_moe.{m}") for m in ("gate_proj", "up_proj", "down_proj")),
    ),
    config_keys=config_keys(
        linear_key_heads="linear_num_heads",
        linear_value_heads="linear_num_heads",
        linear_key_head_dim="linear_head_dim",
        linear_value_head_dim="linear_head_dim",
    ),
)
# Ling 3 (bailing_hybrid): Kimi-Linear's layout with KDA layers whose projections are all full rank
# (f_proj, g_proj) and whose forget gate is bounded where kda_safe_gate says so (kda_lower_bound *
# sigmoid(exp(A_log) (f + dt_bias)), MixerSpec.bounded_decay), DeepSeek-V3's latent attention with RoPE
# pairs on the rope dims and a sigmoid gate per head (g_proj [Nq, H]) before o_proj, its router, experts and
# shared experts whose SwiGLU is clipped after the activation at a limit per layer (min(silu(g), l) *
# clip(u, -l, l); 0: none), the dense MLPs unclipped. Names as the hub (and transformers' save_pretrained)
# spell them: word_embeddings, every mixer under attention (o_proj: dense), the KDA's q/k/v_conv1d and
# forget gate tensors directly there, the router's expert_bias (docs/hybrid-state.md §8.20)
_BAILING_KDA = GatedDeltaNetNames(
    qkv="attention.qkv_proj",  # the graph's name for the concatenated q | k | v weight
    qkv_parts=("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    conv="attention.conv1d",
    conv_parts=("attention.q_conv1d", "attention.k_conv1d", "attention.v_conv1d"),
    z="attention.g_proj",
    a="attention.f_proj",
    b="attention.b_proj",
    a_log="attention.A_log",
    dt_bias="attention.dt_bias",
    norm="attention.o_norm",
    out_proj="attention.dense",
    decay="per_channel",
    gate="sigmoid",
)
_BAILING_MLA = LatentAttentionNames(
    **{
        k: v.replace("self_attn.", "attention.", 1)
        for k, v in vars(LatentAttentionNames()).items()
        if isinstance(v, str)
    }
)
BAILING_HYBRID = replace(
    DEEPSEEK_V3,
    name="bailing_hybrid",
    embed="word_embeddings.weight",
    layer=LayerNames(o="attention.dense", output_gate="attention.g_proj"),
    latent_attention=_BAILING_MLA,
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "gated_deltanet"}), gated_deltanet=_BAILING_KDA, bounded_decay=True
    ),
    moe=replace(
        DEEPSEEK_V3.moe,  # type: ignore[arg-type]
        names=MoeNames(shared_expert="shared_experts", expert_bias="gate.expert_bias|gate.e_score_correction_bias"),
        activation="swiglu_limited",
        layer_rules=("mlp_layer_types", "first_dense_layers"),
    ),
    config_keys=config_keys(
        first_dense_layers="first_k_dense_replace",
        linear_key_heads="linear_num_heads",
        linear_value_heads="linear_num_heads",
        linear_key_head_dim="linear_head_dim",
        linear_value_head_dim="linear_head_dim",
    ),
    ignore=("rope_interleave",),  # the class always rotates pairs
)
# Qwen4-Exp's text decoder (transformers 5.25, docs/coverage.md): Qwen3.5-MoE's gated DeltaNet, gated GQA and
# experts with three additions. Hyper-connection residual copies in the gated form (graph/hyper_connections.py:
# per-copy (1 + w) RMSNorms, a low-rank silu / sigmoid mixer into each block, 2 sigmoid injections out of it),
# which stand for the layers' input norms and, at the end, the final norm. A QSA indexer on every attention layer
# ("indexed_attention"): within indexer_budget + indexer_compress_ratio - 1 keys it keeps them all, so the package
# is plain gated GQA, the indexer's weights not read, its context capped there (model/sparse_cap.py). PLE layers
# (hashed n-gram tables, two more states per layer) are refused; the DeltaNet's gate is output_gate_type's, the
# top-k weights renormalized iff norm_topk_prob (Qwen3-Next's router)
QWEN4_EXP = replace(
    QWEN3_5_MOE,
    name="qwen4_exp",
    final_norm=None,
    layer=LayerNames(input_norm=None, post_attention_norm=None, q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"),
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "gated_deltanet"}),
        gated_deltanet=GatedDeltaNetNames(gate="config"),
    ),
    layer_type_names=MappingProxyType({"indexed_attention": "full_attention"}),
    qsa_type="indexed_attention",
    hyper_connections=HyperConnectionNames(
        attention="attn_hyper_connection", mlp="mlp_hyper_connection", head=("hyper_connection_mixer",), form="gated"
    ),
    moe=MoeSpec(MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate")),  # norm_topk_prob's
    config_keys=config_keys(hc_streams="hc_count"),
    refusals=(
        Refusal(
            "ple_layer_ids",
            "Qwen4-Exp's PLE layers are not supported: each carries a token-id history for its hashed n-gram tables "
            "and a dilated convolution window beside the DeltaNet's conv and recurrent states, and onnxruntime-genai "
            "0.18 binds two recurrent states per layer (docs/coverage.md); export a config without ple_layer_ids",
        ),
    ),
)
# GLM-5-Next's text decoder (glm5_next_text, run only inside Glm5NextForConditionalGeneration: --text-only;
# transformers 5.25, docs/coverage.md "glm5_next"): Kimi-Linear's layout (KDA layers on linear_attention, q/k/v
# under one conv, NoPE latent attention on indexed_attention, dense MLPs where mlp_layer_types says "dense", else
# DeepSeek-V3's grouped biased-sigmoid experts and shared ones) with five mechanisms other specs build: Ling 3's
# bounded KDA forget gate (linear_lower_bound * sigmoid(exp(A_log) (f + dt_bias))), every latent norm at
# rms_norm_eps, GLM-MoE-DSA's indexer within index_topk (every visible key kept: complete pools plus the tail),
# so its weights are not read and the context is capped there, DeepSeek-V4's Sinkhorn hyper-connection copies
# (the head their plain mean, no stored map) and its SwiGLU clipped at swiglu_limit in every MLP (routed, shared,
# dense). The hub keeps the forget gate's and the streams' tensors at the layer (hc_attn_fn, ...)
_KIMI_MIXERS = KIMI_LINEAR.mixers
assert _KIMI_MIXERS is not None
GLM5_NEXT_TEXT = replace(
    KIMI_LINEAR,
    name="glm5_next_text",
    latent_attention=LatentAttentionNames(config_norm_eps=True),
    mixers=replace(_KIMI_MIXERS, bounded_decay=True),
    layer_type_names=MappingProxyType({"indexed_attention": "full_attention"}),
    hyper_connections=HyperConnectionNames(head=(), form="sinkhorn"),
    moe=replace(
        DEEPSEEK_V3.moe,  # type: ignore[arg-type]
        activation="swiglu_clipped",
        shared_clipped=True,
        layer_rules=("mlp_layer_types",),
    ),
    tensor_aliases=(
        *KIMI_LINEAR.tensor_aliases[:4],  # the forget gate's tensors, nested in transformers 5.x's modules
        *((f"{hc}.", f"hc_{short}_") for hc, short in (("attn_hc", "attn"), ("ffn_hc", "ffn"))),
    ),
    config_keys=MappingProxyType(
        {**KIMI_LINEAR.config_keys, "num_experts": "n_routed_experts", "linear_decay_bound": "linear_lower_bound"}
    ),
    refusals=(
        Refusal(
            "linear_lower_bound",
            "GLM-5-Next without linear_lower_bound (its KDA's softplus forget gate) is not exported: set the bound",
            values=(None,),
        ),
    ),
)
HYBRIDS = (
    LFM2, LFM2_MOE, LFM3, QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT, OLMO_HYBRID, MINIMAX, KIMI_LINEAR, BAILING_HYBRID,
    GRANITEMOEHYBRID, JAMBA, FALCON_H1, LARA_MINI, QWEN4_EXP, GLM5_NEXT_TEXT,
    NEMOTRON_H,
)  # fmt: skip
