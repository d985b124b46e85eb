"""State-space families (issue #39 item 3): decoders whose layers are Mamba2 or Mamba mixers, beside
attention layers or with none at all, each read from its modeling code in transformers 5.24 and
written as a `replace()` of the closest hybrid spec (docs/hybrid-state.md §8.9, docs/coverage.md §4).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.hybrid_families import JAMBA
from gqa_export.arch.mixer_spec import MixerSpec

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

STATE_SPACE = (BAMBA,)
