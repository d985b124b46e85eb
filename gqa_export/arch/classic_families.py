"""The classic decoders still in wide use: GPT-2, GPT-NeoX / Pythia, OPT, GPT-J, Falcon, Bloom,
MPT, CodeGen (issue #24).

What sets them apart is data here: learned absolute position tables (GPT-2, OPT with its offset
of 2), Conv1D weights stored [in, out] (GPT-2), fused qkv weights in their own row orders
(`qkv_layout`: GPT-NeoX and Bloom head by head, Falcon per kv group, CodeGen in q | v | k
blocks), LayerNorms with biases, parallel residuals (GPT-NeoX's and Falcon-40B's two norms,
GPT-J's and Falcon-7B's one), partial and interleaved RoPE (GPT-J, CodeGen), ALiBi instead of
RoPE (Bloom, MPT: standard Attention only, docs/architecture.md §2.3), multi-query flags
(Falcon), an embedding LayerNorm (Bloom), and the layouts this graph does not build, refused in
one line (docs/classic-decoders.md).
"""

from __future__ import annotations

from gqa_export.arch.spec import AbsolutePositions, ArchSpec, LayerNames, Refusal, config_keys

# the tanh-approximated GELU in each of its names (gelu_fast: transformers' FastGELUActivation, the same formula,
# which SantaCoder's bigcode/gpt_bigcode-santacoder config names), and the exact one
_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_tanh", "gelu_fast", "gelu")
# GPT-2 / GPT-J configs: activation_function, layer_norm_epsilon, n_inner (None: 4 * hidden)
_GPT2_KEYS = config_keys(activation="activation_function", norm_eps="layer_norm_epsilon", intermediate_size="n_inner")

GPT2 = ArchSpec(
    name="gpt2",
    embed="wte.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        input_norm="ln_1",
        post_attention_norm="ln_2",
        qkv="attn.c_attn",
        o="attn.c_proj",
        up="mlp.c_fc",
        down="mlp.c_proj",
    ),
    norm="layer",
    mlp="plain",
    activations=(*_GELUS, "relu"),
    rope_layers="none",
    positions=AbsolutePositions("wpe.weight"),
    linear_layout="in_out",
    config_keys=_GPT2_KEYS,
    decoder_prefixes=("transformer.",),
    # reorder_and_upcast_attn only computes the eager scores in float32 (transformers' sdpa path ignores it): read as is
    scaled_scores="scale_attn_weights",
    inverse_layer_scale="scale_attn_by_inverse_layer_idx",
    refusals=(Refusal("add_cross_attention", "add_cross_attention (an encoder-decoder GPT-2) is not a causal LM"),),
)
GPT_NEOX = ArchSpec(
    name="gpt_neox",
    embed="embed_in.weight",
    final_norm="final_layer_norm.weight",
    layer=LayerNames(
        qkv="attention.query_key_value", o="attention.dense", up="mlp.dense_h_to_4h", down="mlp.dense_4h_to_h"
    ),
    norm="layer",
    mlp="plain",
    activations=_GELUS,
    parallel_key="parallel_residual",  # use_parallel_residual: attention and MLP on the layer input, own norms
    qkv_layout="grouped",  # one q | k | v per head (as many kv heads as heads)
    decoder_prefixes=("gpt_neox.",),
    lm_head_names=("embed_out.weight",),
)
OPT = ArchSpec(
    name="opt",
    final_norm="final_layer_norm.weight",
    layer=LayerNames(
        input_norm="self_attn_layer_norm",
        post_attention_norm="final_layer_norm",
        o="self_attn.out_proj",
        up="fc1",
        down="fc2",
    ),
    norm="layer",
    fixed_norm_eps=1e-5,  # nn.LayerNorm's default: OPT's config has no eps
    mlp="plain",
    activations=("relu", *_GELUS),
    rope_layers="none",
    positions=AbsolutePositions("embed_positions.weight", offset=2),
    config_keys=config_keys(activation="activation_function", intermediate_size="ffn_dim"),
    decoder_prefixes=("model.decoder.",),
    refusals=(
        Refusal(
            "do_layer_norm_before",
            "OPT with do_layer_norm_before false (post-norm layers, opt-350m) is not supported",
            (False,),
        ),
        Refusal(
            "word_embed_proj_dim",
            "OPT with word_embed_proj_dim != hidden_size (project_in/project_out, opt-350m) is not supported",
            differs_from="hidden_size",
        ),
        Refusal(
            "_remove_final_layer_norm", "OPT without its final LayerNorm (_remove_final_layer_norm) is not supported"
        ),
        Refusal(
            "layer_norm_elementwise_affine",
            "OPT with parameter-free LayerNorms (layer_norm_elementwise_affine false) is not supported",
            (False,),
        ),
    ),
)
GPTJ = ArchSpec(
    name="gptj",
    embed="wte.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        input_norm="ln_1",
        post_attention_norm=None,
        q="attn.q_proj",
        k="attn.k_proj",
        v="attn.v_proj",
        o="attn.out_proj",
        up="mlp.fc_in",
        down="mlp.fc_out",
    ),
    norm="layer",
    norm_layout="parallel",  # attention and MLP both off ln_1
    mlp="plain",
    activations=_GELUS,
    rope_interleaved=True,  # rotate_every_two on the first rotary_dim channels
    fixed_rope_theta=10000.0,  # create_sinusoidal_positions' base, whatever the config says
    config_keys=_GPT2_KEYS,
    decoder_prefixes=("transformer.",),
)
# Falcon, Bloom, MPT, CodeGen: fused qkv layouts, ALiBi, multi-query flags, embedding LayerNorm
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
# +-clip_qkv, exact-GELU MLP of 4 x hidden (transformers' MptMLP hard-codes it; expansion_ratio unread),
# tied; its attention options live in the nested attn_config. transformers implements neither qk_ln nor
# prefix_lm nor learned positions without ALiBi, so those are refused rather than exported as HF computes them.
_MPT_ATTN = "attn_config."
MPT = ArchSpec(
    name="mpt",
    norm="layer",
    mlp="plain",
    activations=("gelu",),
    alibi="bias_max",
    rope_layers="none",
    ffn_size="hidden_ratio",
    ignore=("ffn_ratio",),
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
    fixed_rope_theta=10000.0,  # its rotary's base, whatever the config says
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
CLASSICS = (GPT2, GPT_NEOX, OPT, GPTJ, FALCON, BLOOM, MPT, CODEGEN)
