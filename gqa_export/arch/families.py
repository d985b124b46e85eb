"""One spec per family. Only what differs from the Llama defaults is written down."""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.spec import ArchSpec, LayerNames, PerLayerInputNames, Refusal

GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")

LLAMA = ArchSpec(name="llama")
# Mistral, Qwen2, Granite and SmolLM3 are Llama-shaped; their differences are config-driven
# (biases found in the checkpoint, windows, multipliers, NoPE layers).
MISTRAL = ArchSpec(name="mistral")
MINISTRAL3 = ArchSpec(name="ministral3", query_position_scale=True)
QWEN2 = ArchSpec(name="qwen2")
GRANITE = ArchSpec(name="granite")
SMOLLM3 = ArchSpec(name="smollm3")
QWEN3 = ArchSpec(name="qwen3", qk_norm="head", layer=LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm"))
PHI3 = ArchSpec(name="phi3", layer=LayerNames(qkv="self_attn.qkv_proj", gate_up="mlp.gate_up_proj"))
GEMMA = ArchSpec(name="gemma", activations=GELU_TANH)
_SANDWICH = LayerNames(
    pre_feedforward_norm="pre_feedforward_layernorm", post_feedforward_norm="post_feedforward_layernorm"
)
GEMMA2 = ArchSpec(name="gemma2", norm_layout="sandwich", activations=GELU_TANH, layer=_SANDWICH)
_ENCODER_ONLY = Refusal(
    "use_bidirectional_attention",
    "use_bidirectional_attention makes every layer bidirectional (an embedding encoder such as EmbeddingGemma), "
    "not a causal LM; export a generative checkpoint",
    (True, "all"),
)
GEMMA3 = ArchSpec(
    name="gemma3",
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
)
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
    ),
    refusals=(
        Refusal(
            "enable_moe_block",
            "Gemma-4 with a mixture-of-experts block (enable_moe_block) is not supported yet; "
            "the dense Gemma-4 checkpoints are",
        ),
        _ENCODER_ONLY,
    ),
)
# gemma4_unified_text: the same decoder without per-layer embeddings; it has no MoE field (a stray
# enable_moe_block is ignored by transformers), so only the encoder-only setting is refused.
GEMMA4_UNIFIED = replace(GEMMA4, name="gemma4_unified", per_layer_inputs=None, refusals=(_ENCODER_ONLY,))
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

ALL = (
    LLAMA,
    MISTRAL,
    MINISTRAL3,
    QWEN2,
    QWEN3,
    PHI3,
    GEMMA,
    GEMMA2,
    GEMMA3,
    GEMMA4,
    GEMMA4_UNIFIED,
    SMOLLM3,
    GRANITE,
    OLMO2,
)
