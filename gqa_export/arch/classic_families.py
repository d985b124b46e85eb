"""The classic decoders still in wide use: GPT-2, GPT-NeoX / Pythia, OPT, GPT-J.

What sets them apart is data here: learned absolute position tables (GPT-2, OPT with its offset
of 2), Conv1D weights stored [in, out] (GPT-2), a fused qkv stored head by head (GPT-NeoX),
LayerNorms with biases, parallel residuals (GPT-NeoX's two norms, GPT-J's one), partial and
interleaved RoPE (GPT-J), and the layouts this graph does not build, refused in one line.
"""

from __future__ import annotations

from gqa_export.arch.spec import AbsolutePositions, ArchSpec, LayerNames, Refusal, config_keys

_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_tanh", "gelu")
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
    refusals=(
        Refusal("scale_attn_weights", "scale_attn_weights false (unscaled scores) is not supported", (False,)),
        Refusal(
            "scale_attn_by_inverse_layer_idx",
            "scale_attn_by_inverse_layer_idx (scores scaled by 1 / (layer + 1)) is not supported",
        ),
        Refusal("reorder_and_upcast_attn", "reorder_and_upcast_attn is not supported"),
        Refusal("add_cross_attention", "add_cross_attention (an encoder-decoder GPT-2) is not a causal LM"),
    ),
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
    qkv_rows="per_head",
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
    config_keys=_GPT2_KEYS,
    decoder_prefixes=("transformer.",),
)
CLASSICS = (GPT2, GPT_NEOX, OPT, GPTJ)
