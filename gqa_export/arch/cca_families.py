"""Families whose attention projections carry recurrent state (compressed convolutional attention)."""

from __future__ import annotations

from types import MappingProxyType

from gqa_export.arch.mixer_spec import MixerSpec
from gqa_export.arch.moe_spec import MoeNames, MoeSpec
from gqa_export.arch.spec import ArchSpec, LayerNames

# ZAYA1 (transformers 5.25): pre-norm layers, every one attention with compressed convolutional
# attention's projections (graph/cca.py: q|k through a depthwise and a grouped causal Conv1d with a conv
# state, residual q/k paths, a value half delayed by one token with a recurrent state, q/k L2-normed
# to sqrt(head_dim), keys times a per-kv-head temperature) beside its KV cache, RoPE on half of each
# head at a theta per layer type ("hybrid" full, "hybrid_sliding" windowed); the embedding and both
# sides of every residual add under learned affine maps (graph/affine_residual.py); experts on every
# layer chosen by an MLP router over a stream carried from layer to layer with a "skip" class that
# computes nothing (graph/stream_router.py)
ZAYA = ArchSpec(
    name="zaya",
    layer=LayerNames(
        q="self_attn.qkv_proj.q_proj",
        k="self_attn.qkv_proj.k_proj",
        v="self_attn.qkv_proj.v_proj_current",
        affine_residuals=("post_attention_residual_scale", "post_mlp_residual_scale"),
    ),
    input_affine=("input_hidden_states_bias", "input_hidden_states_scale"),
    layer_type_names=MappingProxyType({"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}),
    mixers=MixerSpec(kinds=MappingProxyType({}), mixing="parallel", every_layer="cca"),
    moe=MoeSpec(MoeNames(routers=("gate.down_proj",)), routing="skip_stream"),
)

CCA_FAMILIES = (ZAYA,)
