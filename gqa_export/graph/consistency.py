"""config.json against the weights, before any graph is built.

transformers fills a key missing from config.json with its class default (a Llama without
`hidden_size` gets 4096), so neither a missing key nor a wrong value fails on reading; the export
would then build a graph the weights do not fit, and fail much later with an onnxruntime shape
error that never names the config. Here the shapes the config implies are checked against the
stored tensors, and each mismatch is one sentence naming the key.
"""

from __future__ import annotations

from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.dims import ModelDims
from gqa_export.source.weights import WeightStore

# keys that must be positive integers wherever config.json gives them (head_dim may be null)
POSITIVE_INT_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
    "head_dim",
)
REQUIRED_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
# per-layer patterns whose length transformers takes as the layer count (Nemotron-H's config class
# derives num_hidden_layers from them and does not save it); the weights check the count
LAYER_COUNT_PATTERNS = ("layers_block_type", "hybrid_override_pattern")
# the older spellings configs still carry, which transformers maps through attribute_map (GPT-2,
# GPT-J, Bloom, MPT, CodeGen)
KEY_ALIASES = {
    "hidden_size": ("n_embd", "d_model"),
    "num_attention_heads": ("n_head", "n_heads"),
    "num_hidden_layers": ("n_layer", "n_layers"),
    "max_position_embeddings": ("n_positions",),
}


def check_raw_config(raw: dict[str, Any]) -> None:
    """Types and presence of the size keys, in the decoder's own config (text_config if nested)."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    for key in POSITIVE_INT_KEYS:
        value = next((v for k in (key, *KEY_ALIASES.get(key, ())) if (v := text.get(k)) is not None), None)
        counted = key == "num_hidden_layers" and any(text.get(k) for k in LAYER_COUNT_PATTERNS)
        if value is None and (key not in REQUIRED_KEYS or counted):
            continue
        if value is None:
            raise InputError(f"config.json has no '{key}'; add the model's {key} (it sizes the graph)")
        if key == "intermediate_size" and isinstance(value, list) and value:  # one width per layer (Gemma-3n)
            value = min(value) if all(isinstance(v, int) and not isinstance(v, bool) for v in value) else value
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"config.json: '{key}' must be a positive integer, got {value!r}")


def check_against_weights(dims: ModelDims, spec: ArchSpec, store: WeightStore) -> None:
    """The config's sizes against the embedding, the layer count and each layer's projections."""
    embed = spec.tensor(spec.embed)
    if embed in store:
        rows, cols = store.info(embed).shape[:2]
        _same("hidden_size", dims.hidden_size, cols, embed, (rows, cols))
        _same("vocab_size", dims.vocab_size, rows, embed, (rows, cols))
    stored_layers = _stored_layers(spec, store)
    if stored_layers and max(stored_layers) + 1 != dims.num_layers:
        raise InputError(
            f"config.json says num_hidden_layers {dims.num_layers} but the checkpoint holds "
            f"{max(stored_layers) + 1} layers; the config does not belong to these weights"
        )
    for i, layer in enumerate(dims.layers):
        prefix = f"{spec.prefix}{spec.layer_prefix.format(i=i)}"
        names = spec.layer
        q = f"{prefix}{names.q}.weight"
        if names.qkv is None and q in store and not layer.shares_kv:
            shape = store.info(q).shape
            gate = 2 if spec.attention_output_gate else 1  # Qwen3.5: each head's query and output gate
            _same("num_attention_heads / head_dim", gate * dims.num_heads * layer.head_dim, shape[0], q, shape)
            _same("hidden_size", dims.hidden_size, shape[1], q, shape)
        down = f"{prefix}{names.down}.weight"
        dense_only = spec.moe is None or (spec.moe.layer_type is not None and not layer.sparse)
        if dense_only and down in store and len(store.info(down).shape) == 2:
            shape = store.info(down).shape
            if spec.linear_layout == "in_out":  # Conv1D: stored [in, out]
                shape = shape[::-1]
            _same("intermediate_size", layer.intermediate_size, shape[1], down, shape)
            _same("hidden_size", dims.hidden_size, shape[0], down, shape)


def _stored_layers(spec: ArchSpec, store: WeightStore) -> set[int]:
    head, _, tail = f"{spec.prefix}{spec.layer_prefix}".partition("{i}")
    found = set()
    for name in store.names():
        if name.startswith(head):
            index = name[len(head) :].split(tail, 1)[0] if tail else name[len(head) :]
            if index.isdigit():
                found.add(int(index))
    return found


def _same(key: str, expected: int, stored: int, tensor: str, shape: tuple[int, ...]) -> None:
    if expected != stored:
        raise InputError(
            f"config.json's {key} gives {expected} but {tensor} is {list(shape)}; "
            "the config does not belong to these weights (fix config.json)"
        )
