"""The classic decoders still in wide use (issue #24): Falcon, Bloom, MPT, CodeGen.

They predate the Llama layout: their checkpoints live under `transformer.` with GPT-style module
names, fuse q/k/v into one weight in their own row orders (`ArchSpec.qkv_layout`), and Bloom and
MPT position tokens with ALiBi instead of RoPE (`ArchSpec.alibi`, standard Attention only:
docs/architecture.md §2.3). Every spec here was read off transformers 5.24's modeling code.
"""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec, LayerNames, Refusal, config_keys

_TRANSFORMER = ("transformer.",)
_LAYER_NORM_EPS = "layer_norm_epsilon"

# Falcon (7B: multi-query, attention and MLP in parallel off one input_layernorm; 40B/180B:
# new_decoder_architecture, num_kv_heads groups and their own ln_attn / ln_mlp), RoPE over the whole
# head, exact-erf GELU MLP, biases where config.bias; its ALiBi variant rounds the bias through
# bfloat16 and scales it with the scores, which is refused.
FALCON = ArchSpec(
    name="falcon",
    norm="layer",
    mlp="plain",
    activations=("gelu",),
    parallel_key="parallel_residual",
    qkv_layout="grouped",
    kv_heads_rule="multi_query_flags",
    embed="word_embeddings.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        qkv="self_attention.query_key_value",
        o="self_attention.dense",
        up="mlp.dense_h_to_4h",
        down="mlp.dense_4h_to_h",
        parallel_norms=("ln_attn", "ln_mlp"),
    ),
    refusals=(
        Refusal(
            "alibi",
            "Falcon's ALiBi variant (falcon-rw) rounds its position bias through bfloat16 inside the scaled "
            "scores, which no export reproduces exactly; only the RoPE Falcons (alibi false) are supported",
        ),
    ),
    decoder_prefixes=_TRANSFORMER,
    config_keys=config_keys(
        activation="activation",
        norm_eps=_LAYER_NORM_EPS,
        parallel_residual="parallel_attn",
        kv_heads="num_kv_heads",
        intermediate_size="ffn_hidden_size",
    ),
)
# Bloom: ALiBi instead of RoPE, a LayerNorm right after the embedding, q | k | v fused per head
# (the grouped layout with a kv head per head), tanh-GELU MLP of 4 x hidden, biases everywhere, tied
BLOOM = ArchSpec(
    name="bloom",
    norm="layer",
    mlp="plain",
    activations=("gelu_tanh",),  # bloom_gelu_forward; the config names no activation
    qkv_layout="grouped",
    alibi="geometric",
    rope_layers="none",
    embedding_norm="word_embeddings_layernorm.weight",
    ffn_size="hidden_ratio",
    embed="word_embeddings.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        qkv="self_attention.query_key_value",
        o="self_attention.dense",
        up="mlp.dense_h_to_4h",
        down="mlp.dense_4h_to_h",
    ),
    refusals=(
        Refusal(
            "apply_residual_connection_post_layernorm",
            "Bloom with apply_residual_connection_post_layernorm (the residual taken after the norm) is not "
            "supported; no published Bloom sets it",
        ),
    ),
    decoder_prefixes=_TRANSFORMER,
    config_keys=config_keys(norm_eps=_LAYER_NORM_EPS),
)
CLASSIC = (FALCON, BLOOM)
