"""Issue #39's classic-lineage families, each read from its modeling code in transformers 5.25 and
written as a `replace()` of the closest spec: what differs is named by what it does.

Jais-2: Nemotron's layers (LayerNorm with biases, a non-gated squared-ReLU MLP, q/k/v/o and MLP
biases) with plain LayerNorms where Nemotron's act as 1 + w, full-width RoPE.
GPT-NeoX-Japanese: GPT-NeoX's per-head fused qkv and partial rotate-half RoPE in sequential pre-norm
layers without biases, but the last layer's attention output bias (a separate `dense_bias`
parameter), an MLP of intermediate_multiple_size x hidden.
"""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.classic_families import GPT_NEOX
from gqa_export.arch.families import NEMOTRON
from gqa_export.arch.spec import config_keys

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

CLASSIC_DERIVED = (JAIS2, GPT_NEOX_JAPANESE)
