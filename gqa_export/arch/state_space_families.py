"""State-space families (issue #39 item 3): decoders whose layers are Mamba2, Mamba or RG-LRU mixers,
beside attention layers or with none at all, each read from its modeling code in transformers 5.24 and
written as a `replace()` of the closest hybrid spec (docs/hybrid-state.md §8.9-§8.15, docs/coverage.md
§4). A stack without attention (MixerSpec.attention False) reads no attention keys, and its package
carries recurrent state only, no KV cache, which onnxruntime-genai 0.18 runs (§8.10).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.mamba_hybrid_families import JAMBA, NEMOTRON_H
from gqa_export.arch.mixer_spec import MambaNames, MixerSpec, RgLruNames
from gqa_export.arch.shared_block_spec import SharedBlockNames
from gqa_export.arch.spec import ArchSpec, LayerNames, Refusal, config_keys

# Bamba: Jamba's layer layout (input_layernorm, pre_ff_layernorm, feed_forward.*, final_layernorm)
# with Granite-4.0-H's Mamba2 mixer (mamba.*, the group-wise gated norm after the gate, dt clamped
# by time_step_limit in prompts only) and Llama attention layers (attn_layer_indices) with RoPE on
# the first half of each head (the config class fixes partial_rotary_factor at 0.5); a dense SwiGLU
# MLP on every layer, no experts, no multipliers (docs/hybrid-state.md §8.9).
BAMBA = replace(
    JAMBA,
    name="bamba",
    moe=None,
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "mamba2", "mamba": "mamba2"}), prompt_dt_limit="time_step_limit"
    ),
    rope_layers="all",
    ignore=(),
)

# Mamba2: Nemotron-H's one-block layers (backbone.embeddings, layers.N.norm, layers.N.mixer.*,
# norm_f) with a Mamba2 mixer on every layer and no attention layer at all: the package carries conv
# and SSM state and no KV cache (docs/hybrid-state.md §8.10). The config spells the mixer's sizes
# num_heads / head_dim / n_groups / state_size / conv_kernel / expand, its conv's activation
# hidden_act; HF clamps dt with time_step_limit in prompts only, as Granite-4.0-H's mixer does.
_MAMBA2_KEYS = config_keys(
    norm_eps="layer_norm_epsilon", mamba_heads="num_heads", mamba_head_dim="head_dim", mamba_groups="n_groups",
    mamba_state="state_size", mamba_conv_kernel="conv_kernel", mamba_expand="expand", mamba_activation="hidden_act",
)  # fmt: skip
# rescale_prenorm_residual is an init-time flag, but the Mamba, Falcon-Mamba and Mamba2 classes of
# transformers 5.x apply it in _init_weights to the loaded weights too (`out_proj.weight /= sqrt(layers)`,
# unguarded, unlike Nemotron-H's): HF then runs weights the checkpoint does not hold. Refused rather
# than built to match one of the two silently.
_RESCALED_OUT_PROJ = Refusal(
    "rescale_prenorm_residual",
    "rescale_prenorm_residual: transformers 5.x divides the stored out_proj weights by sqrt(num_hidden_layers) "
    "when it loads this checkpoint, so the export cannot match both; the flag is init-only: set it false in "
    "config.json",
)
MAMBA2 = replace(
    NEMOTRON_H,
    name="mamba2",
    decoder_prefixes=("backbone.",),
    layer=LayerNames(input_norm="norm", post_attention_norm=None),
    mlp="gated",
    activations=("silu",),
    mixers=MixerSpec(
        kinds=MappingProxyType({}),
        every_layer="mamba2",  # 5.x's layer_types says so; 4.x's config has none
        mamba2=NEMOTRON_H.mixers.mamba2,  # type: ignore[union-attr]
        prompt_dt_limit="time_step_limit",
        attention=False,
    ),
    layer_blocks=MappingProxyType({}),
    moe=None,
    config_keys=_MAMBA2_KEYS,
    ignore=(),
    refusals=(_RESCALED_OUT_PROJ,),
)

# Mamba (v1): Mamba2's stack with Jamba's Mamba mixer (in_proj x | z, conv, x_proj dt | B | C,
# dt_proj, A_log [I, N], D) under mixer.* and no dt/B/C norms; the config spells state_size,
# conv_kernel and time_step_rank ("auto": ceil(hidden / 16), resolved by the class), the inner width
# intermediate_size (expand * hidden unless given); tied embeddings by default (docs/hybrid-state.md §8.11)
_MAMBA_MIXER = MambaNames(
    **{k: v.replace("mamba.", "mixer.", 1) for k, v in vars(MambaNames()).items() if isinstance(v, str)}
)
_MAMBA_KEYS = config_keys(
    norm_eps="layer_norm_epsilon", mamba_state="state_size", mamba_conv_kernel="conv_kernel", mamba_expand="expand",
    mamba_dt_rank="time_step_rank", mamba_inner="intermediate_size",
)  # fmt: skip
MAMBA = replace(
    MAMBA2,
    name="mamba",
    mixers=MixerSpec(
        kinds=MappingProxyType({}), every_layer="mamba", mamba=_MAMBA_MIXER, attention=False, mamba_dt_bc_norm="none"
    ),
    config_keys=_MAMBA_KEYS,
)
# Falcon-Mamba: Mamba's layers with RMSNorms on dt, B and C that have no weight (F.rms_norm at
# mixer_rms_eps; the class's unit weights are non-persistent buffers, never stored)
FALCON_MAMBA = replace(
    MAMBA,
    name="falcon_mamba",
    mixers=replace(MAMBA.mixers, mamba_dt_bc_norm="unit"),  # type: ignore[type-var]
)

# Zamba2: a Mamba2 mixer behind one RMSNorm on every layer (mamba.*; Bamba's mixer with silu, a conv
# bias always, the gated norm at eps 1e-5 whatever rms_norm_eps says, dt floored at time_step_min in
# prompts only); the "hybrid" layers first run one of num_mem_blocks shared attention + MLP blocks on
# [hidden | embeddings] (heads of 2 H / heads, scores scaled by (head_dim / 2) ** -0.5, RoPE where
# use_mem_rope, per-use adapters, a KV cache per use), project its output by their own `linear` and
# add it to the mixer's input, not to the residual (docs/hybrid-state.md §8.12)
_ZAMBA2_KEYS = config_keys(mamba_heads="n_mamba_heads", mamba_groups="mamba_ngroups", mamba_head_dim="mamba_headdim")
_ONE_BLOCK = MappingProxyType({"linear_attention": "mixer", "mamba": "mixer", "hybrid": "mixer"})
ZAMBA2 = ArchSpec(
    name="zamba2",
    final_norm="final_layernorm.weight",
    layer=LayerNames(post_attention_norm=None, gate_up="feed_forward.gate_up_proj", down="feed_forward.down_proj"),
    activations=("gelu", "gelu_pytorch_tanh", "gelu_new", "silu"),
    half_head_dim_scale=True,
    rope_layers="if_flag",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "mamba2", "mamba": "mamba2", "hybrid": "mamba2"}),
        prompt_dt_floor="time_step_min",
        mamba2_norm_eps=1e-5,
    ),
    layer_blocks=_ONE_BLOCK,
    shared_block=SharedBlockNames(),
    config_keys=_ZAMBA2_KEYS,
)

# Zamba: Zamba2's layout with Mamba (v1) mixers in heads (each head its own x_proj and dt_proj, stored
# as stacked parameters; in_proj's x and z rows interleaved per channel), no dt/B/C norms, and one
# shared block (shared_transf.*, every hybrid layer's use) without adapters, RoPE or a fused gate_up
# (docs/hybrid-state.md §8.13)
_ZAMBA_MIXER = MambaNames(
    x_proj="mamba.x_proj_weight", dt_proj="mamba.dt_proj_weight", dt_bias="mamba.dt_proj_bias", per_head=True
)
_ZAMBA_LAYER = LayerNames(
    post_attention_norm=None, gate="feed_forward.gate_proj", up="feed_forward.up_proj", down="feed_forward.down_proj"
)
_ZAMBA_KEYS = config_keys(
    mamba_heads="n_mamba_heads", mamba_state="mamba_d_state", mamba_conv_kernel="mamba_d_conv",
    mamba_expand="mamba_expand", mamba_dt_rank="mamba_dt_rank", mamba_activation="hidden_mamba_act",
)  # fmt: skip
ZAMBA = replace(
    ZAMBA2,
    name="zamba",
    layer=_ZAMBA_LAYER,
    rope_layers="none",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "mamba", "mamba": "mamba", "hybrid": "mamba"}),
        mamba=_ZAMBA_MIXER,
        mamba_dt_bc_norm="none",
    ),
    shared_block=SharedBlockNames(block="shared_transf.", adapters=MappingProxyType({})),
    config_keys=_ZAMBA_KEYS,
)

# RecurrentGemma (Griffin): pre-norm layers (temporal_pre_norm -> temporal block -> add, channel_pre_norm
# -> MLP -> add) whose temporal block is, by block_types (layer_types "linear_attention" /
# "sliding_attention"), the RG-LRU recurrent block (conv + a scalar state per channel) or local
# attention within attention_window_size (MQA/GQA, RoPE on the first half of each head, an o_proj
# bias); Gemma's (1 + w) RMSNorms, the embeddings times sqrt(hidden) rounded to bfloat16, a
# gelu-tanh MLP of intermediate_size // 2 with biases, logits soft-capped at logits_soft_cap, the
# lm_head tied (docs/hybrid-state.md §8.15)
_RECURRENT_GEMMA_LAYER = LayerNames(
    input_norm="temporal_pre_norm", post_attention_norm="channel_pre_norm", q="temporal_block.q_proj",
    k="temporal_block.k_proj", v="temporal_block.v_proj", o="temporal_block.o_proj", gate="mlp_block.gate_proj",
    up="mlp_block.up_proj", down="mlp_block.down_proj",
)  # fmt: skip
RECURRENT_GEMMA = ArchSpec(
    name="recurrent_gemma",
    final_norm="final_norm.weight",
    layer=_RECURRENT_GEMMA_LAYER,
    norm_offset=1.0,
    embedding_scale="sqrt_hidden_bf16",
    activations=("gelu_pytorch_tanh", "gelu_tanh", "gelu_new"),
    mixers=MixerSpec(kinds=MappingProxyType({"linear_attention": "rglru"}), rglru=RgLruNames()),
    ffn_size="half",
    config_keys=config_keys(activation="hidden_activation", final_softcap="logits_soft_cap"),
)


# RWKV-4: one RwkvBlock per layer under rwkv.blocks.N (ln1 -> time mix -> add, ln2 -> channel mix ->
# add), a LayerNorm of the embeddings stored as blocks.0.pre_ln, ln_out, an untied `head`; LayerNorms
# with biases at layer_norm_epsilon (ln_out at nn.LayerNorm's 1e-5). No attention: each layer carries
# its two token-shift inputs and its WKV numerator, denominator and running max (docs/hybrid-state.md §8.18)
_RWKV_KEYS = config_keys(
    norm_eps="layer_norm_epsilon", rwkv_channels="attention_hidden_size", rwkv_rescale="rescale_every"
)
RWKV = ArchSpec(
    name="rwkv",
    embed="embeddings.weight",
    final_norm="ln_out.weight",
    layer_prefix="blocks.{i}.",
    layer=LayerNames(input_norm="ln1", post_attention_norm="ln2"),
    norm="layer",
    embedding_norm="blocks.0.pre_ln.weight",
    mixers=MixerSpec(kinds=MappingProxyType({}), every_layer="rwkv", attention=False),
    config_keys=_RWKV_KEYS,
    decoder_prefixes=("rwkv.",),
    lm_head_names=("head.weight",),
)

# xLSTM (xLSTMForCausalLM, the 7B's "xLSTM-large" blocks): backbone.blocks.N with norm_mlstm -> mLSTM ->
# add, norm_ffn -> SwiGLU (proj_up_gate, proj_up, proj_down) -> add; RMSNorms at norm_eps, out_norm, an
# untied lm_head whose logits are soft-capped at output_logit_soft_cap (docs/hybrid-state.md §8.19)
_XLSTM_KEYS = config_keys(
    norm_eps="norm_eps", final_softcap="output_logit_soft_cap", ffn_ratio="ffn_proj_factor",
    ffn_multiple_of="ffn_round_up_to_multiple_of",
)  # fmt: skip
XLSTM = ArchSpec(
    name="xlstm",
    embed="embeddings.weight",
    final_norm="out_norm.weight",
    layer_prefix="blocks.{i}.",
    layer=LayerNames(
        input_norm="norm_mlstm",
        post_attention_norm="norm_ffn",
        gate="ffn.proj_up_gate",
        up="ffn.proj_up",
        down="ffn.proj_down",
    ),
    ffn_size="rounded_ratio",
    mixers=MixerSpec(
        kinds=MappingProxyType({}), every_layer="mlstm", attention=False, state_only_blocks="mixer_and_mlp"
    ),
    layer_blocks=MappingProxyType({}),
    config_keys=_XLSTM_KEYS,
    decoder_prefixes=("backbone.",),
)

STATE_SPACE = (BAMBA, MAMBA2, MAMBA, FALCON_MAMBA, ZAMBA2, ZAMBA, RECURRENT_GEMMA, RWKV, XLSTM)
