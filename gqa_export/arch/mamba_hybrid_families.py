"""The hybrids whose recurrent layers are Mamba mixers (Mamba2 or Mamba v1: a short convolution and an
SSM state, docs/hybrid-state.md §8.2-§8.7) beside attention. arch/hybrid_families.py lists them
in HYBRIDS with the convolution, DeltaNet and linear-attention hybrids."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.families import GRANITEMOE
from gqa_export.arch.mixer_spec import Mamba2Names, MixerSpec, Multiplier
from gqa_export.arch.spec import ArchSpec, LayerNames, MoeNames, MoeSpec, config_keys

# Granite-4.0-H: Mamba2 layers (conv + SSM state) between Granite attention layers (NoPE unless
# position_embedding_type is "rope"), Granite's multipliers, GraniteMoE's top-k router with an
# ungated shared MLP beside the experts, or that MLP alone when num_local_experts is 0
# (docs/hybrid-state.md §8.2).
_GRANITE_SHARED_MLP = ("shared_mlp.input_linear", "shared_mlp.output_linear")
GRANITEMOEHYBRID = replace(
    GRANITEMOE,
    name="granitemoehybrid",
    layer=LayerNames(gate_up=_GRANITE_SHARED_MLP[0], down=_GRANITE_SHARED_MLP[1]),
    moe=replace(GRANITEMOE.moe, names=replace(GRANITEMOE.moe.names, shared_mlp=_GRANITE_SHARED_MLP)),  # type: ignore[union-attr]
    # HF clamps dt with time_step_limit in its chunked (prompt) form only (docs/hybrid-state.md §8.2)
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "mamba2", "mamba": "mamba2"}), prompt_dt_limit="time_step_limit"
    ),
    rope_layers="if_configured",
    ffn_size="shared",
    config_keys=config_keys(shared_expert_intermediate_size="shared_intermediate_size"),
)
# Jamba's and Falcon-H1's layer names: the MLP under `feed_forward.`, its norm `pre_ff_layernorm`
_FEED_FORWARD_LAYER = LayerNames(
    post_attention_norm="pre_ff_layernorm",
    gate="feed_forward.gate_proj",
    up="feed_forward.up_proj",
    down="feed_forward.down_proj",
)
# Jamba: Mamba (v1) layers (conv + a per-channel SSM state, dt/B/C RMSNorms) between NoPE GQA
# layers (attn_layer_period/offset), experts on expert_layer_period/offset (softmax over every
# expert, the top k kept unnormalized), a dense MLP elsewhere (docs/hybrid-state.md §8.3)
JAMBA = ArchSpec(
    name="jamba",
    final_norm="final_layernorm.weight",
    layer=_FEED_FORWARD_LAYER,
    moe=MoeSpec(MoeNames(blocks=("feed_forward.",), routers=("router",)), layer_rules=("expert_layer_period",)),
    mixers=MixerSpec(kinds=MappingProxyType({"mamba": "mamba"})),
    rope_layers="none",
    # transformers 5.x spells the pattern layer_types ("linear_attention" / "full_attention"), 4.x
    # only layers_block_type, which both have; 4.x's sliding_window reached flash-attention only
    config_keys=config_keys(layer_types="layers_block_type"),
    ignore=("sliding_window",),
)
# Falcon-H1: every layer runs GQA (RoPE) and a Mamba2 mixer side by side on the same normed input
# and adds their outputs, then a gated MLP; µP multipliers on the embedding, the logits and around
# the projections, ssm_multipliers per segment (z | x | B | C | dt) of the Mamba2 in_proj; the gated
# norm is optional (mamba_rms_norm) and may come before the gate (docs/hybrid-state.md §8.4).
FALCON_H1 = ArchSpec(
    name="falcon_h1",
    final_norm="final_layernorm.weight",
    layer=_FEED_FORWARD_LAYER,
    mixers=MixerSpec(
        kinds=MappingProxyType({}), mixing="parallel", every_layer="mamba2", prompt_dt_limit="time_step_limit"
    ),
    embedding_scale="config",
    config_keys=config_keys(logit_scale="lm_head_multiplier"),
    multipliers=(
        *(Multiplier(f"self_attn.{p}_proj", "attention_in_multiplier", "input") for p in "qkv"),
        Multiplier("self_attn.k_proj", "key_multiplier"),
        Multiplier("self_attn.o_proj", "attention_out_multiplier"),
        Multiplier("mamba.in_proj", "ssm_in_multiplier", "input"),
        Multiplier("mamba.in_proj", "ssm_multipliers", segments="mamba2"),
        Multiplier("mamba.out_proj", "ssm_out_multiplier"),
        Multiplier("feed_forward.gate_proj", "mlp_multipliers", index=0),
        Multiplier("feed_forward.down_proj", "mlp_multipliers", index=1),
    ),
)
# Nemotron-H: each layer is ONE block behind one RMSNorm and residual, chosen by its pattern entry
# (layers_block_type, read as layer_types; hybrid_override_pattern M / * / - / E on disk): a Mamba2
# mixer whose dt HF clamps in prompts only (before transformers 5.25 floored at time_step_min, from
# 5.25 with time_step_limit, as Granite-4.0-H's), NoPE attention, a squared-ReLU MLP, or
# a mixture of ungated squared-ReLU experts under DeepSeek-V3's grouped biased-sigmoid router with
# an ungated shared expert, optionally between latent projections (docs/hybrid-state.md §8.6, §8.7).
_NEMOTRON_H_MOE = MoeSpec(
    MoeNames(
        blocks=("mixer.",),
        per_expert=(),
        fused=(),
        ungated=(("experts.{e}.up_proj", "experts.{e}.down_proj"), ("experts.up_proj", "experts.down_proj")),
        shared_expert="shared_experts",
        expert_bias="gate.e_score_correction_bias",
        latent=("fc1_latent_proj", "fc2_latent_proj"),
    ),
    routing="sigmoid_group_biased",
    activation="ungated",
    layer_type="moe",
    router_dtype="float32",  # NemotronHTopkRouter: F.linear(x.float(), W.float()), fp32 correction bias
)
_NEMOTRON_H_LAYER = LayerNames(
    input_norm="norm", post_attention_norm=None, q="mixer.q_proj", k="mixer.k_proj", v="mixer.v_proj",
    o="mixer.o_proj", up="mixer.up_proj", down="mixer.down_proj",
)  # fmt: skip
_NEMOTRON_H_KEYS = config_keys(
    activation="mlp_hidden_act", norm_eps="layer_norm_epsilon", mamba_heads="mamba_num_heads",
    shared_expert_intermediate_size="moe_shared_expert_intermediate_size",
    mamba_groups="n_groups", mamba_state="ssm_state_size", mamba_head_dim="mamba_head_dim",
    mamba_conv_kernel="conv_kernel", mamba_expand="expand",
)  # fmt: skip
NEMOTRON_H = ArchSpec(
    name="nemotron_h",
    # the hub's and transformers' save spell the root backbone.; the omni class's decoder sits under
    # language_model.backbone. (its hub layout) or language_model.model. (transformers 5.x's)
    decoder_prefixes=("backbone.", "model.", "language_model.backbone.", "language_model.model."),
    embed="embeddings.weight",
    final_norm="norm_f.weight",
    layer=_NEMOTRON_H_LAYER,
    mlp="plain",
    activations=("relu2",),
    rope_layers="none",
    mixers=MixerSpec(
        kinds=MappingProxyType({"linear_attention": "mamba2"}),
        mamba2=Mamba2Names(**{k: v.replace("mamba.", "mixer.", 1) for k, v in vars(Mamba2Names()).items()}),
        prompt_dt_floor="time_step_min",
        prompt_dt_limit="time_step_limit",
        prompt_dt_floor_until=(5, 25),
    ),
    layer_blocks=MappingProxyType({"linear_attention": "mixer", "full_attention": "mixer", "mlp": "mlp", "moe": "mlp"}),
    moe=_NEMOTRON_H_MOE,
    config_keys=_NEMOTRON_H_KEYS,
)
