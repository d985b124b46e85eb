"""One spec per family. Only what differs from the Llama defaults is written down."""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec, LayerNames

GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")

LLAMA = ArchSpec(name="llama")
# Mistral, Qwen2, Granite and SmolLM3 are Llama-shaped; their differences are config-driven
# (biases found in the checkpoint, windows, multipliers, NoPE layers).
MISTRAL = ArchSpec(name="mistral")
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
GEMMA3 = ArchSpec(
    name="gemma3",
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

ALL = (LLAMA, MISTRAL, QWEN2, QWEN3, PHI3, GEMMA, GEMMA2, GEMMA3, SMOLLM3, GRANITE, OLMO2)
