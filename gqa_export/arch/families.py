"""One spec per family. Only what differs from the Llama defaults is written down."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.classic_families import CLASSIC
from gqa_export.arch.spec import (
    FUSED_EXPERTS,
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    ArchSpec,
    BidirectionalRuns,
    GatedDeltaNetNames,
    LayerNames,
    MixerSpec,
    MoeNames,
    MoeSpec,
    Multiplier,
    PerLayerInputNames,
    Refusal,
    config_keys,
)

GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")

LLAMA = ArchSpec(name="llama")
# Mistral, Qwen2, Granite and SmolLM3 are Llama-shaped; their differences are config-driven
# (biases found in the checkpoint, windows, multipliers, NoPE layers).
MISTRAL = ArchSpec(name="mistral")
MINISTRAL3 = ArchSpec(name="ministral3", query_position_scale=True)
QWEN2 = ArchSpec(name="qwen2")
GRANITE = ArchSpec(name="granite", embedding_scale="config")
SMOLLM3 = ArchSpec(name="smollm3")
QWEN3 = ArchSpec(name="qwen3", qk_norm="head", layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"))
PHI3 = ArchSpec(name="phi3", layer=LayerNames(qkv="self_attn.qkv_proj", gate_up="mlp.gate_up_proj"))
# Gemma's RMSNorm computes (1 + w) and its embedding module multiplies by sqrt(hidden)
_GEMMA_NUMERICS: dict = dict(norm_offset=1.0, embedding_scale="sqrt_hidden")
_HIDDEN_ACTIVATION = config_keys(activation="hidden_activation")
GEMMA = ArchSpec(name="gemma", activations=GELU_TANH, **_GEMMA_NUMERICS)
_SANDWICH = LayerNames(
    pre_feedforward_norm="pre_feedforward_layernorm", post_feedforward_norm="post_feedforward_layernorm"
)
GEMMA2 = ArchSpec(
    name="gemma2",
    norm_layout="sandwich",
    activations=GELU_TANH,
    layer=_SANDWICH,
    config_keys=_HIDDEN_ACTIVATION,
    **_GEMMA_NUMERICS,
)
_ENCODER_ONLY = Refusal(
    "use_bidirectional_attention",
    "use_bidirectional_attention makes every layer bidirectional (an embedding encoder such as EmbeddingGemma), "
    "not a causal LM; export a generative checkpoint",
    (True, "all"),
)
GEMMA3 = ArchSpec(
    name="gemma3",
    sliding_rope="local_base",
    refusals=(_ENCODER_ONLY,),
    norm_layout="sandwich",
    activations=GELU_TANH,
    qk_norm="head",
    layer=LayerNames(
        pre_feedforward_norm="pre_feedforward_layernorm",
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
    ),
    config_keys=_HIDDEN_ACTIVATION,
    **_GEMMA_NUMERICS,
)
# Gemma3ForConditionalGeneration: image runs attend bidirectionally on every layer within the window;
# this class never applies final_logit_softcapping though its config may carry it
GEMMA3_VISION = replace(
    GEMMA3,
    name="gemma3_vision",
    ignore=("final_softcap",),
    bidirectional=BidirectionalRuns(("image_token_index",), window="bounded"),
)
_GEMMA4_PLACEHOLDERS = ("image_token_id", "video_token_id", "audio_token_id")
# Gemma-4 text decoder (gemma4_text, and the decoder of gemma4 / gemma4_unified): Gemma-3's layout
# with plain RMSNorm weights, unscaled scores, a scaleless v-norm, per-layer head dims, KV-shared
# layers, per-layer embeddings, a per-layer residual scalar, and vision runs that attend
# bidirectionally on sliding layers only, within the window (models/gemma4/modeling_gemma4.py).
GEMMA4 = ArchSpec(
    name="gemma4",
    norm_layout="sandwich",
    activations=GELU_TANH,
    qk_norm="head",
    v_norm=True,
    unit_attention_scale=True,
    per_layer_inputs=PerLayerInputNames(),
    layer=LayerNames(
        pre_feedforward_norm="pre_feedforward_layernorm",
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        per_layer_gate="per_layer_input_gate",
        per_layer_projection="per_layer_projection",
        per_layer_norm="post_per_layer_input_norm",
        layer_scalar="layer_scalar",
        pre_feedforward_norm_2="pre_feedforward_layernorm_2",
        post_feedforward_norm_1="post_feedforward_layernorm_1",
        post_feedforward_norm_2="post_feedforward_layernorm_2",
    ),
    # enable_moe_block: the dense MLP and the experts side by side (their router reads the residual)
    moe=MoeSpec(
        MoeNames(blocks=("",), routers=("router.proj",), per_expert=()), routing="normed_residual", activation="geglu"
    ),
    refusals=(_ENCODER_ONLY,),
    embedding_scale="sqrt_hidden",
    config_keys=_HIDDEN_ACTIVATION,
    placeholder_keys=_GEMMA4_PLACEHOLDERS,
    bidirectional=BidirectionalRuns(
        ("image_token_id", "video_token_id"), "use_bidirectional_attention=vision", layers="sliding", window="bounded"
    ),
)
# gemma4_unified_text: the same decoder without per-layer embeddings; it has no MoE field (a stray
# enable_moe_block is ignored by transformers), so only the encoder-only setting is refused.
# Its forward (default cache) masks runs with transformers' generic block mask: every layer, not
# bounded by the window.
GEMMA4_UNIFIED = replace(
    GEMMA4,
    name="gemma4_unified",
    per_layer_inputs=None,
    moe=None,
    bidirectional=BidirectionalRuns(
        ("image_token_id", "video_token_id"), "use_bidirectional_attention=vision", layers="all", window="unbounded"
    ),
)

# Mixtures of experts. Names cover the hub's per-expert layout and transformers 5.x's fused one.
_MOE = MoeSpec()  # Qwen3-MoE / OLMoE: softmax over all experts, top-k renormalized iff norm_topk_prob
QWEN3_MOE = replace(QWEN3, name="qwen3_moe", moe=_MOE)
QWEN2_MOE = ArchSpec(
    name="qwen2_moe", moe=MoeSpec(MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate"))
)
MIXTRAL = ArchSpec(
    name="mixtral",
    moe=MoeSpec(
        MoeNames(blocks=("block_sparse_moe.", "mlp."), per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ)), normalize=True
    ),
)
# OLMoE: pre-norm layers with OLMo-2's full-width q/k norms and clip_qkv
OLMOE = ArchSpec(
    name="olmoe",
    qk_norm="full",
    layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"),
    moe=_MOE,
)
# GraniteMoE: Granite's multipliers; hub tensors are the fused ones under other names
GRANITEMOE = ArchSpec(
    name="granitemoe",
    embedding_scale="config",
    moe=MoeSpec(
        MoeNames(
            blocks=("block_sparse_moe.",),
            routers=("router.layer", "router"),
            per_expert=(),
            fused=(("input_linear", "output_linear"), FUSED_EXPERTS),
        ),
        normalize=True,
    ),
)
# PhiMoE (Phi-3.5-MoE): LayerNorm with biases, sparsemixer router, longrope
PHIMOE = ArchSpec(
    name="phimoe",
    norm="layer",
    moe=MoeSpec(
        MoeNames(blocks=("block_sparse_moe.", "mlp."), routers=("gate", "router"), per_expert=(PER_EXPERT_W,)),
        routing="sparsemixer",
    ),
)
# gpt-oss: attention sinks, experts with biases and the clamped SwiGLU, transposed interleaved
# expert tensors (or MXFP4 blocks), router with a bias
GPT_OSS = ArchSpec(
    name="gpt_oss",
    attention_sinks="self_attn.sinks",
    moe=MoeSpec(
        MoeNames(routers=("router",), per_expert=(), fused=(), transposed=FUSED_EXPERTS),
        normalize=True,
        activation="swiglu_clamped",
    ),
)
OLMO2 = ArchSpec(
    name="olmo2",
    norm_layout="post",
    qk_norm="full",
    layer=LayerNames(
        input_norm=None,
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
    ),
)

# Dense families, second wave (tests/dense_models.py; transformers 5.24 modeling code)
PHI = ArchSpec(  # Phi-2: parallel block off one LayerNorm, plain gelu_new MLP, biases everywhere
    name="phi",
    norm="layer",
    norm_layout="parallel",
    mlp="plain",
    qk_norm="head",  # optional q/k LayerNorms (qk_layernorm)
    activations=GELU_TANH,
    final_norm="final_layernorm.weight",
    layer=LayerNames(
        post_attention_norm=None,
        o="self_attn.dense",
        up="mlp.fc1",
        down="mlp.fc2",
        q_norm="self_attn.q_layernorm",
        k_norm="self_attn.k_layernorm",
    ),
)
OLMO = ArchSpec(name="olmo", norm="layer_free", fixed_norm_eps=1e-5)  # LayerNorm without parameters, clip_qkv
OLMO3 = replace(
    OLMO2, name="olmo3", sliding_rope="unscaled"
)  # OLMo-2's post-norms and full-width q/k norms, sliding layers
# LayerNorm1P: the stored weight acts as 1 + w
NEMOTRON = ArchSpec(name="nemotron", norm="layer", mlp="plain", activations=("relu2",), norm_offset=1.0)
STABLELM = ArchSpec(
    name="stablelm",
    norm="layer",
    parallel_key="parallel_residual",  # use_parallel_residual: one norm feeds both branches
    qk_norm="head",  # optional per-head LayerNorms (qk_layernorm), one module per head
    head_dim_from_hidden=True,
    layer=LayerNames(q_norm="self_attn.q_layernorm", k_norm="self_attn.k_layernorm"),
)
STARCODER2 = ArchSpec(
    name="starcoder2",
    norm="layer",
    mlp="plain",
    activations=GELU_TANH,
    layer=LayerNames(up="mlp.c_fc", down="mlp.c_proj"),
)
COHERE = ArchSpec(  # Command-R: parallel block, LayerNorm without bias, GPT-J RoPE, logit_scale
    name="cohere",
    norm="layer",
    norm_layout="parallel",
    qk_norm="head",  # optional (use_qk_norm): a [heads, head_dim] LayerNorm weight
    rope_interleaved=True,
    layer=LayerNames(post_attention_norm=None, q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"),
)
COHERE2 = replace(COHERE, name="cohere2", rope_layers="sliding")  # global layers without RoPE
GLM4 = ArchSpec(  # GLM-4: four RMSNorms a layer, fused gate_up, partial GPT-J RoPE
    name="glm4",
    norm_layout="sandwich",
    rope_interleaved=True,
    layer=LayerNames(
        post_attention_norm="post_self_attn_layernorm",
        pre_feedforward_norm="post_attention_layernorm",
        post_feedforward_norm="post_mlp_layernorm",
        gate_up="mlp.gate_up_proj",
    ),
)
EXAONE4 = ArchSpec(  # EXAONE-4: post-norms only, per-head q/k norms, global layers NoPE when windowed
    name="exaone4",
    norm_layout="post",
    qk_norm="head",
    rope_layers="sliding_if_windowed",
    layer=LayerNames(
        input_norm=None,
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
    ),
)
ERNIE4_5 = ArchSpec(name="ernie4_5", rope_interleaved=True)  # Llama with GPT-J RoPE
HUNYUAN = ArchSpec(  # HunYuan dense: per-head q/k RMSNorms after RoPE, NTK-alpha RoPE
    name="hunyuan_v1_dense",
    qk_norm="head",
    qk_norm_after_rope=True,
    layer=LayerNames(q_norm="self_attn.query_layernorm", k_norm="self_attn.key_layernorm"),
)
APERTUS = ArchSpec(  # Apertus: plain xIELU MLP, per-head q/k norms, renamed layer norms
    name="apertus",
    mlp="plain",
    activations=("xielu",),
    qk_norm="head",
    layer=LayerNames(
        input_norm="attention_layernorm",
        post_attention_norm="feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
    ),
)
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
    ),
)
# Qwen3.5-MoE's text decoder: Qwen3.5's layers with a sparse block on every layer (softmax top-k,
# always renormalized) plus Qwen2-MoE's sigmoid-gated shared expert
QWEN3_5_MOE = replace(
    QWEN3_5,
    name="qwen3_5_moe",
    moe=MoeSpec(MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate"), normalize=True),
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
    moe=MoeSpec(MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate")),
)
# Granite-4.0-H: Mamba2 layers (conv + SSM state) between Granite attention layers (NoPE unless
# position_embedding_type is "rope"), Granite's multipliers, GraniteMoE's top-k router with an
# ungated shared MLP beside the experts, or that MLP alone when num_local_experts is 0
# (docs/hybrid-state.md §8.2).
_GRANITE_SHARED_MLP = ("shared_mlp.input_linear", "shared_mlp.output_linear")
GRANITEMOEHYBRID = replace(
    GRANITEMOE,
    name="granitemoehybrid",
    layer=LayerNames(gate_up=_GRANITE_SHARED_MLP[0], down=_GRANITE_SHARED_MLP[1]),
    moe=replace(GRANITEMOE.moe, names=replace(GRANITEMOE.moe.names, shared_mlp=_GRANITE_SHARED_MLP)),  # type: ignore[union-attr]
    mixers=MixerSpec(kinds=MappingProxyType({"linear_attention": "mamba2", "mamba": "mamba2"})),
    rope_layers="if_configured",
    ffn_size="shared",
    config_keys=config_keys(shared_expert_intermediate_size="shared_intermediate_size"),
)
# Jamba: Mamba (v1) layers (conv + a per-channel SSM state, dt/B/C RMSNorms) between NoPE GQA
# layers (attn_layer_period/offset), experts on expert_layer_period/offset (softmax over every
# expert, the top k kept unnormalized), a dense MLP elsewhere (docs/hybrid-state.md §8.3)
JAMBA = ArchSpec(
    name="jamba",
    final_norm="final_layernorm.weight",
    layer=LayerNames(
        post_attention_norm="pre_ff_layernorm",
        gate="feed_forward.gate_proj",
        up="feed_forward.up_proj",
        down="feed_forward.down_proj",
    ),
    moe=MoeSpec(MoeNames(blocks=("feed_forward.",), routers=("router",))),
    mixers=MixerSpec(kinds=MappingProxyType({"mamba": "mamba"})),
    rope_layers="none",
    # transformers 5.x spells the pattern layer_types ("linear_attention" / "full_attention"), 4.x
    # only layers_block_type, which both have; 4.x's sliding_window reached flash-attention only
    config_keys=config_keys(layer_types="layers_block_type"),
    ignore=("sliding_window",),
)
# Falcon-H1: every layer runs GQA (RoPE) and a Mamba2 mixer side by side on the same normed input
# and adds their outputs, then a gated MLP; µP multipliers on the embedding, the logits and around
# the projections, ssm_multipliers per segment (z | x | B | C | dt) of the Mamba2 in_proj; the gated
# norm is optional (mamba_rms_norm) and may come before the gate (docs/hybrid-state.md §8.4).
FALCON_H1 = ArchSpec(
    name="falcon_h1",
    final_norm="final_layernorm.weight",
    layer=LayerNames(
        post_attention_norm="pre_ff_layernorm",
        gate="feed_forward.gate_proj",
        up="feed_forward.up_proj",
        down="feed_forward.down_proj",
    ),
    mixers=MixerSpec(kinds=MappingProxyType({}), mixing="parallel", every_layer="mamba2"),
    embedding_scale="config",
    config_keys=config_keys(logit_scale="lm_head_multiplier"),
    multipliers=(
        *(Multiplier(f"self_attn.{p}_proj", "attention_in_multiplier", "input") for p in "qkv"),
        Multiplier("self_attn.k_proj", "key_multiplier"),
        Multiplier("self_attn.o_proj", "attention_out_multiplier"),
        Multiplier("mamba.in_proj", "ssm_in_multiplier", "input"),
        Multiplier("mamba.in_proj", "ssm_multipliers", segments="mamba2"),
        Multiplier("mamba.out_proj", "ssm_out_multiplier"),
        Multiplier("feed_forward.gate_proj", "mlp_multipliers", index=0),
        Multiplier("feed_forward.down_proj", "mlp_multipliers", index=1),
    ),
)
ALL = (
    LLAMA, MISTRAL, MINISTRAL3, QWEN2, QWEN3, PHI3, GEMMA, GEMMA2, GEMMA3, GEMMA3_VISION, GEMMA4, GEMMA4_UNIFIED,
    SMOLLM3,
    GRANITE, OLMO2, QWEN3_MOE, QWEN2_MOE, MIXTRAL, OLMOE, GRANITEMOE, PHIMOE, GPT_OSS,
    PHI, OLMO, OLMO3, NEMOTRON, STABLELM, STARCODER2, COHERE, COHERE2, GLM4, EXAONE4, ERNIE4_5, HUNYUAN, APERTUS,
    LFM2, LFM2_MOE, QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT, GRANITEMOEHYBRID, JAMBA, FALCON_H1, *CLASSIC,
)  # fmt: skip
