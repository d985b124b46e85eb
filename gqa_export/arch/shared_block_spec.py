"""Module names of Zamba2's shared transformer blocks (docs/hybrid-state.md §8.12): a few attention +
MLP blocks whose weights are reused by many layers, each use with its own low-rank adapters, its
own KV cache and its own projection of the block's output into the layer's Mamba input.

Names are relative to a layer (`ArchSpec.layer_tensor`). transformers ties the block of use u to the
block of the first layer that used block u % num_mem_blocks, and save_pretrained keeps only that
layer's copy: so every use reads `block` under that first layer, adapters included (use u's adapter
is entry u of the block's adapter lists)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _adapters() -> Mapping[str, str]:
    return MappingProxyType(
        {
            "self_attn.q_proj": "self_attn.linear_q_adapter_list.{u}",
            "self_attn.k_proj": "self_attn.linear_k_adapter_list.{u}",
            "self_attn.v_proj": "self_attn.linear_v_adapter_list.{u}",
            "feed_forward.gate_up_proj": "feed_forward.gate_up_proj_adapter_list.{u}",
        }
    )


@dataclass(frozen=True)
class SharedBlockNames:
    """layer_type: the config's layer type of a layer that runs a shared block before its mixer
    ("hybrid"); blocks_key: the config key of how many distinct blocks alternate (num_mem_blocks).
    block: the block's modules under the layer of its first use (input_norm over [hidden | embeddings],
    the attention's self_attn.*, mlp_norm, the MLP's fused feed_forward.gate_up_proj and down_proj in
    the spec's LayerNames); mixer: the hybrid layer's own norm and Mamba mixer; linear: the layer's
    [H, H] projection of the block's output. adapters: a block Linear -> its adapter pair
    (`.0` [r, in] then `.1` [out, r]) for use u, added to the Linear's output where the checkpoint
    holds it (the attention adapters exist only with use_shared_attention_adapter)."""

    layer_type: str = "hybrid"
    blocks_key: str = "num_mem_blocks"
    block: str = "shared_transformer."
    mixer: str = "mamba_decoder."
    linear: str = "linear"
    input_norm: str = "input_layernorm"
    mlp_norm: str = "pre_ff_layernorm"
    adapters: Mapping[str, str] = field(default_factory=_adapters)
