"""One spec per family. Only what differs from the Llama defaults is written down."""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.spec import (
    DECODER_PREFIXES,
    FUSED_EXPERTS,
    LM_HEAD_NAMES,
    PER_EXPERT_PROJ,
    PER_EXPERT_W,
    STRAY_WINDOW,
    ArchSpec,
    BidirectionalRuns,
    LayerNames,
    MoeNames,
    MoeSpec,
    PerLayerInputNames,
    Refusal,
    config_keys,
)
from gqa_export.arch.stream_spec import AlternatingUpdateNames, AugmentedResidualNames, HardTokenEmbedderNames

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
_ENCODER_ONLY = Refusal(
    "use_bidirectional_attention",
    "use_bidirectional_attention makes every layer bidirectional (an embedding encoder such as EmbeddingGemma), "
    "not a causal LM; export a generative checkpoint",
    (True, "all"),
)
# transformers 5.x's Gemma reads use_bidirectional_attention too (is_causal False; Gemma-2 runs eager
# only, on the causal masks it builds, so there the flag changes nothing)
GEMMA = ArchSpec(name="gemma", activations=GELU_TANH, refusals=(_ENCODER_ONLY,), **_GEMMA_NUMERICS)
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
# Gemma-3's attention never passes attn_logit_softcapping to its attention function (4.57 and 5.x), though
# its config carries the key
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
    ignore=("attn_softcap",),
    **_GEMMA_NUMERICS,
)
# Gemma3ForConditionalGeneration: image runs attend bidirectionally on every layer within the window;
# this class never applies final_logit_softcapping (nor attn_logit_softcapping) though its config may carry them
# ShieldGemma2ForImageClassification holds this class under `model.`: transformers 5.x keeps its decoder at
# model.model.language_model. and saves it at model.model.language_model.model.; the 4.x release layout
# has it at model.language_model.model.
GEMMA3_VISION = replace(
    GEMMA3,
    name="gemma3_vision",
    ignore=("final_softcap", "attn_softcap"),
    bidirectional=BidirectionalRuns(("image_token_index",), window="bounded"),
    decoder_prefixes=(
        *DECODER_PREFIXES,
        "model.model.language_model.",
        "model.model.language_model.model.",
        "model.language_model.model.",
    ),
    lm_head_names=(*LM_HEAD_NAMES, "model.lm_head.weight", "model.language_model.lm_head.weight"),
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
# Gemma-3n text decoder (gemma3n_text, and the decoder of gemma3n): Gemma-4's attention, KV sharing,
# per-layer embeddings and plain RMSNorm weights, inside alternating updates over parallel streams,
# with a low-rank augmented residual beside attention, per-layer MLP widths and gaussian top-k gate
# sparsity on some layers; the multimodal class embeds its vision/audio control ids through the
# towers' own embedders (models/gemma3n/modeling_gemma3n.py; docs/gemma3n.md).
GEMMA3N = replace(
    GEMMA4,
    name="gemma3n",
    moe=None,
    refusals=(),
    placeholder_keys=(),
    bidirectional=None,
    alternating_updates=AlternatingUpdateNames(),
    augmented_residual=AugmentedResidualNames(),
    activation_sparsity=True,
    hard_token_embedders=(
        HardTokenEmbedderNames("vision_config", "embed_vision"),
        HardTokenEmbedderNames("audio_config", "embed_audio"),
    ),
)

# Mixtures of experts. Names cover the hub's per-expert layout and transformers 5.x's fused one.
_QWEN_RULES = ("decoder_sparse_step", "mlp_only_layers")  # the keys Qwen-MoE's classes place their experts by
# Qwen3-MoE / OLMoE: softmax over all experts, top-k renormalized iff norm_topk_prob; Qwen3-MoE places its experts
# by decoder_sparse_step outside mlp_only_layers, OLMoE on every layer
_MOE = MoeSpec(layer_rules=_QWEN_RULES)
QWEN3_MOE = replace(QWEN3, name="qwen3_moe", moe=_MOE)
QWEN2_MOE = ArchSpec(
    name="qwen2_moe",
    moe=MoeSpec(MoeNames(shared_expert="shared_expert", shared_gate="shared_expert_gate"), layer_rules=_QWEN_RULES),
)
MIXTRAL = ArchSpec(
    name="mixtral",
    moe=MoeSpec(
        MoeNames(blocks=("block_sparse_moe.", "mlp."), per_expert=(PER_EXPERT_W, PER_EXPERT_PROJ)),
        normalize=True,
        layer_rules=(),  # experts on every layer
    ),
)
# OLMoE: pre-norm layers with OLMo-2's full-width q/k norms and clip_qkv
OLMOE = ArchSpec(
    name="olmoe",
    qk_norm="full",
    layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"),
    moe=replace(_MOE, layer_rules=()),  # experts on every layer
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
        layer_rules=(),  # experts on every layer (GraniteMoE-Shared's, -Hybrid's too)
    ),
    refusals=(STRAY_WINDOW,),
)
# PhiMoE (Phi-3.5-MoE): LayerNorm with biases, sparsemixer router, longrope
PHIMOE = ArchSpec(
    name="phimoe",
    norm="layer",
    moe=MoeSpec(
        MoeNames(blocks=("block_sparse_moe.", "mlp."), routers=("gate", "router"), per_expert=(PER_EXPERT_W,)),
        routing="sparsemixer",
        layer_rules=(),
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
        layer_rules=(),
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
    ignore=("clip_qkv",),  # OLMo-2's attention (OLMo-3's, FlexOlmo's) never clamps, whatever a config says
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
# Llama-likes and the MoE variants of issue #24 (docs/moe.md §8.1)
_QK_NORMS = LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm")

# Seed-OSS: Llama with a head_dim decoupled from hidden / heads and q/k/v biases without an o_proj
# bias (attention_out_bias); both are read from the config and the checkpoint, so nothing to declare
SEED_OSS = ArchSpec(name="seed_oss")
# Arcee (AFM): Llama with a non-gated squared-ReLU MLP (up -> relu^2 -> down)
ARCEE = ArchSpec(name="arcee", mlp="plain", activations=("relu2",))

ALL = (
    LLAMA, MISTRAL, MINISTRAL3, QWEN2, QWEN3, PHI3, GEMMA, GEMMA2, GEMMA3, GEMMA3_VISION, GEMMA4, GEMMA4_UNIFIED,
    GEMMA3N, SMOLLM3,
    GRANITE, OLMO2, QWEN3_MOE, QWEN2_MOE, MIXTRAL, OLMOE, GRANITEMOE, PHIMOE, GPT_OSS,
    PHI, OLMO, OLMO3, NEMOTRON, STABLELM, STARCODER2, COHERE, COHERE2, GLM4, EXAONE4, ERNIE4_5, HUNYUAN, APERTUS,
    SEED_OSS, ARCEE,
)  # fmt: skip
