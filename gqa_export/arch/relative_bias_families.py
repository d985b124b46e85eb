"""Families whose attention adds a relative position bias computed per query and head (Inkling)."""

from __future__ import annotations

from types import MappingProxyType

from gqa_export.arch.mixer_spec import MixerSpec
from gqa_export.arch.moe_spec import MoeNames, MoeSpec
from gqa_export.arch.relative_bias_spec import RelativeBiasNames, ResidualConvNames
from gqa_export.arch.spec import ArchSpec, LayerNames, config_keys

# Inkling (transformers 5.25, `inkling_text`): pre-norm layers, every one attention without RoPE ("hybrid" full,
# "hybrid_sliding" windowed, each kind with its own query / kv heads and head_dim), per-head q/k RMSNorms and
# scores times 1 / head_dim; a relative position bias per query and head (r_proj(x) times a learned bank, zero
# past rel_extent, a sliding layer's extent its window; graph/relative_bias.py), the full layers' queries and
# bias log-scaled past log_scaling_n_floor; residual short convolutions (kernel conv_kernel_size, float32) on
# the keys and values before the key norm and the cache, on the attention output and on the MLP output, four
# states per layer carried in genai's RecurrentState pair beside the KV cache (graph/residual_convs.py); the
# embedding RMSNormed; dense layers a SwiGLU MLP times a stored scalar, sparse ones the top k of sigmoid +
# selection bias among the routed experts, weighted together with the shared experts by their sigmoids
# normalized over both, times route_scale and a learned scalar (graph/shared_sink_routing.py); logits over
# logits_mup_width_multiplier, the lm_head's first unpadded_vocab_size rows where set
INKLING = ArchSpec(
    name="inkling",
    qk_norm="head",
    rope_layers="none",
    inverse_head_dim_scale=True,
    embedding_norm="embed_tokens.embed_norm.weight",
    layer=LayerNames(
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        mlp_output_scale="mlp.global_scale",
    ),
    layer_type_names=MappingProxyType({"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}),
    sliding_shape_keys=("swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim"),
    mixers=MixerSpec(kinds=MappingProxyType({}), mixing="parallel", every_layer="residual_convs"),
    head_rows_dropped=True,
    relative_bias=RelativeBiasNames(),
    residual_convs=ResidualConvNames(),
    moe=MoeSpec(
        MoeNames(
            shared_expert="shared_experts", expert_bias="gate.e_score_correction_bias", router_scale="gate.global_scale"
        ),
        routing="sigmoid_shared_sink",
        shared_width="per_expert",
        router_dtype="float32",
    ),
    config_keys=config_keys(
        sliding_window="sliding_window_size|sliding_window",
        routed_scaling="route_scale",
        logits_scaling="logits_mup_width_multiplier",
        output_vocab_size="unpadded_vocab_size",
        conv_kernel="conv_kernel_size|sconv_kernel_size",
    ),
)

RELATIVE_BIAS_FAMILIES = (INKLING,)
