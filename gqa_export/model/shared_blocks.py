"""Which layers run a shared transformer block ahead of their mixer, and whose weights each use reads
(Zamba2, docs/hybrid-state.md §8.12; arch/shared_block_spec.py).

The layers of the spec's shared-block type are the block's uses u = 0, 1, ... in layer order; use u
runs block u % num_mem_blocks, whose weights (adapters included) transformers ties to the copy of the
first layer that ran that block, the one copy save_pretrained writes. transformers 5.24 applies a
model's `_tied_weights_keys` only where the config's tie_word_embeddings is true: with it false every
layer keeps and runs its own copy of the block (its own adapter entry u included), and so does the
export."""

from __future__ import annotations

from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


def shared_uses(config: Any, spec: ArchSpec, types: list[str] | None) -> dict[int, tuple[int, int]]:
    """layer index -> (its use u of the shared blocks, the layer whose copy of block u % blocks it reads)."""
    names = spec.shared_block
    if names is None or not types:
        return {}
    layers = [i for i, t in enumerate(types) if t == names.layer_type]
    blocks = int(getattr(config, names.blocks_key, 1) or 1)
    if blocks < 1:
        raise InputError(f"{spec.name}: {names.blocks_key} is {blocks}; it counts the shared blocks, at least 1")
    heads, kv_heads = int(config.num_attention_heads), int(getattr(config, "num_key_value_heads", 0) or 0)
    if getattr(config, "use_shared_attention_adapter", False) and kv_heads not in (0, heads):
        raise InputError(
            f"{spec.name}: use_shared_attention_adapter adds a {2 * int(config.hidden_size)}-wide adapter to "
            f"k_proj and v_proj, which are {kv_heads} of {heads} heads wide (transformers cannot run it either)"
        )
    tied = bool(getattr(config, "tie_word_embeddings", False))  # PreTrainedModel.get_expanded_tied_weights_keys
    return {layer: (u, layers[u % blocks] if tied else layer) for u, layer in enumerate(layers)}
