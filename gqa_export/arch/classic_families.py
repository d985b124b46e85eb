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
# MPT: ALiBi with MosaicML's slopes, no biases (LayerNorms without bias), stacked Wqkv clamped to
# +-clip_qkv, exact-GELU MLP of expansion_ratio x hidden, tied; its attention options live in the
# nested attn_config. transformers implements neither qk_ln nor prefix_lm nor learned positions
# without ALiBi, so those are refused rather than exported as HF computes them.
_MPT_ATTN = "attn_config."
MPT = ArchSpec(
    name="mpt",
    norm="layer",
    mlp="plain",
    activations=("gelu",),
    alibi="bias_max",
    rope_layers="none",
    ffn_size="hidden_ratio",
    embed="wte.weight",
    final_norm="norm_f.weight",
    layer_prefix="blocks.{i}.",
    layer=LayerNames(
        input_norm="norm_1",
        post_attention_norm="norm_2",
        qkv="attn.Wqkv",
        o="attn.out_proj",
        up="ffn.up_proj",
        down="ffn.down_proj",
    ),
    refusals=(
        Refusal(f"{_MPT_ATTN}qk_ln", "MPT's qk_ln (LayerNorms on q and k) is not implemented by transformers' MPT"),
        Refusal(
            f"{_MPT_ATTN}alibi",
            "MPT without ALiBi uses learned position embeddings transformers' MPT does not have",
            (False,),
        ),
        Refusal(f"{_MPT_ATTN}prefix_lm", "MPT's prefix_lm mask is not implemented by transformers' MPT"),
    ),
    decoder_prefixes=_TRANSFORMER,
    config_keys=config_keys(
        norm_eps=_LAYER_NORM_EPS,
        clip_qkv=f"{_MPT_ATTN}clip_qkv",
        attention_multiplier=f"{_MPT_ATTN}softmax_scale",
        alibi_bias_max=f"{_MPT_ATTN}alibi_bias_max",
    ),
)
# CodeGen: attention and MLP in parallel off one LayerNorm (ln_1), qkv_proj fused as four blocks of
# q | v | k, GPT-J RoPE pairs over the first rotary_dim channels, gelu_new MLP, an lm_head bias
CODEGEN = ArchSpec(
    name="codegen",
    norm="layer",
    norm_layout="parallel",
    mlp="plain",
    activations=("gelu_new", "gelu_pytorch_tanh", "gelu_tanh"),
    qkv_layout="blocks_qvk",
    rope_interleaved=True,
    embed="wte.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        input_norm="ln_1",
        post_attention_norm=None,
        qkv="attn.qkv_proj",
        o="attn.out_proj",
        up="mlp.fc_in",
        down="mlp.fc_out",
    ),
    decoder_prefixes=_TRANSFORMER,
    config_keys=config_keys(activation="activation_function", norm_eps=_LAYER_NORM_EPS, intermediate_size="n_inner"),
)
CLASSIC = (FALCON, BLOOM, MPT, CODEGEN)
