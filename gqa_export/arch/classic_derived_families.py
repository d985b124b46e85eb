"""Issue #39's classic-lineage families, each read from its modeling code in transformers 5.25 and
written as a `replace()` of the closest spec: what differs is named by what it does.

Jais-2: Nemotron's layers (LayerNorm with biases, a non-gated squared-ReLU MLP, q/k/v/o and MLP
biases) with plain LayerNorms where Nemotron's act as 1 + w, full-width RoPE.
GPT-NeoX-Japanese: GPT-NeoX's per-head fused qkv and partial rotate-half RoPE in sequential pre-norm
layers without biases, but the last layer's attention output bias (a separate `dense_bias`
parameter), an MLP of intermediate_multiple_size x hidden.
CTRL: GPT-2's sequential pre-norm LayerNorm layers (eps 1e-6 hard-coded) with nn.Linear q/k/v,
token embeddings scaled by sqrt(hidden), the original Transformer's sinusoidal positions (a
non-persistent buffer: computed at export), a ReLU MLP, a tied lm_head with its own bias.
GPT-1 (openai-gpt): GPT-2's Conv1D weights and learned positions in post-LN layers (the residual
sum normed after each block, no final norm), afn "gelu" meaning the tanh GELU.
ModernBERT-decoder: Llama-like pre-norm layers (bias-free LayerNorms, the first without its attention
norm), an embedding LayerNorm, a fused GeGLU, local/global RoPE layers, and BERT's prediction head
before the tied lm_head.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.classic_families import GPT2, GPT_NEOX
from gqa_export.arch.families import NEMOTRON
from gqa_export.arch.spec import AbsolutePositions, ArchSpec, LayerNames, config_keys

# Jais-2: LlamaModel with nn.LayerNorm(layer_norm_eps) norms and NemotronMLP (up -> relu2 -> down)
JAIS2 = replace(NEMOTRON, name="jais2", norm_offset=0.0)

# GPT-NeoX-Japanese: input_layernorm -> attention (+ dense_bias on the last layer) -> add ->
# post_attention_layernorm -> MLP -> add; the tensor names are GPT-NeoX's under gpt_neox_japanese.
GPT_NEOX_JAPANESE = replace(
    GPT_NEOX,
    name="gpt_neox_japanese",
    parallel_key=None,
    ffn_size="hidden_ratio",
    config_keys=config_keys(ffn_ratio="intermediate_multiple_size"),
    # the last layer's attention bias is a parameter beside `dense`, added after it as a Linear's bias is
    tensor_aliases=(("attention.dense.bias", "attention.dense_bias"),),
    decoder_prefixes=("gpt_neox_japanese.",),
)

# CTRL (Salesforce): transformer.w / h.{i} / layernorm; sinusoids from n_positions rows
CTRL = replace(
    GPT2,
    name="ctrl",
    embed="w.weight",
    final_norm="layernorm.weight",
    layer=LayerNames(
        input_norm="layernorm1",
        post_attention_norm="layernorm2",
        q="multi_head_attention.Wq",
        k="multi_head_attention.Wk",
        v="multi_head_attention.Wv",
        o="multi_head_attention.dense",
        up="ffn.0",
        down="ffn.2",
    ),
    activations=("relu",),  # point_wise_feed_forward_network's nn.ReLU; the config names none
    linear_layout="out_in",
    fixed_norm_eps=1e-6,  # the layers' LayerNorms hard-code it; layer_norm_epsilon (1e-6 in every CTRL) the final's
    embedding_scale="sqrt_hidden",
    positions=AbsolutePositions("pos_encoding", sinusoidal=True, sinusoid_rates="transformer"),
    config_keys=config_keys(intermediate_size="dff"),
    refusals=(),
)

# GPT-1: tokens_embed + positions_embed, h.{i}: attn -> add -> ln_1 -> mlp -> add -> ln_2
OPENAI_GPT = replace(
    GPT2,
    name="openai-gpt",
    embed="tokens_embed.weight",
    final_norm=None,
    norm_layout="post_residual",
    layer=LayerNames(
        input_norm=None,
        post_attention_norm="ln_1",
        post_feedforward_norm="ln_2",
        qkv="attn.c_attn",
        o="attn.c_proj",
        up="mlp.c_fc",
        down="mlp.c_proj",
    ),
    positions=AbsolutePositions("positions_embed.weight"),
    activations=("gelu_new", "relu", "silu"),
    activation_names=MappingProxyType({"gelu": "gelu_new", "swish": "silu"}),  # its ACT_FNS
    config_keys=config_keys(activation="afn", norm_eps="layer_norm_epsilon"),
    refusals=(),
)

# ModernBERT-decoder: pre-norm LayerNorm layers (bias per norm_bias) whose first has no attention norm
# (nn.Identity), an embedding LayerNorm, Wi fused [input | gate] with act on the first half (Phi-3's
# gate_up), full and sliding layers by layer_types with a RoPE base each, and BERT's prediction head
# (dense -> classifier_activation -> LayerNorm) before the tied `decoder` with its bias
MODERNBERT_DECODER = ArchSpec(
    name="modernbert-decoder",
    embed="embeddings.tok_embeddings.weight",
    final_norm="final_norm.weight",
    layer=LayerNames(
        input_norm="attn_norm",
        post_attention_norm="mlp_norm",
        q="attn.q_proj",
        k="attn.k_proj",
        v="attn.v_proj",
        o="attn.Wo",
        gate_up="mlp.Wi",
        down="mlp.Wo",
    ),
    norm="layer",
    activations=("gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "relu"),
    embedding_norm="embeddings.norm.weight",
    norms_where_stored=True,
    head_transform=("lm_head.dense", "lm_head.norm"),
    lm_head_names=("decoder.weight",),
    config_keys=config_keys(activation="hidden_activation"),
)

CLASSIC_DERIVED = (JAIS2, GPT_NEOX_JAPANESE, CTRL, OPENAI_GPT, MODERNBERT_DECODER)
