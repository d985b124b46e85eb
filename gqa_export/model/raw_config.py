"""config.json's size keys, read as written, before transformers reads the config.

transformers fills a key missing from config.json with its class default (a Llama without
`hidden_size` gets 4096), so neither a missing key nor a wrong value fails on reading. Here the
keys that size the graph are checked for presence and type in the raw JSON, each problem one
sentence naming the key; source/consistency.py then checks the sizes against the stored tensors.
A multimodal config's nested text_config is the exception to presence: transformers gives it its class defaults
for the keys it leaves out, which releases rely on (llava-1.5's text_config names no width, head or layer count),
so there only the types of the keys given are checked (docs/coverage.md §21); flat keys stay required.
"""

from __future__ import annotations

from typing import Any

from gqa_export.errors import InputError

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
# ONNX Runtime's shapes and the runtime's token positions are int32: no size key is larger
MAX_SIZE = 2**31 - 1
REQUIRED_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
# per-layer patterns whose length transformers takes as the layer count (Nemotron-H's config class
# derives num_hidden_layers from them and does not save it); the weights check the count
LAYER_COUNT_PATTERNS = ("layers_block_type", "hybrid_override_pattern")
# a key a config class derives num_hidden_layers from, by model_type: LongCat-Flash saves num_layers, its
# decoder layers, and num_hidden_layers (two attention sublayers each) is a property it does not save
DERIVED_LAYER_COUNT = {"longcat_flash": "num_layers"}
# a model_type whose config class sets head_dim to its latent attention's rope width, 0 under NoPE (GLM-5-Next:
# the latent widths size its heads), and saves it so
ZERO_HEAD_DIM = frozenset({"glm5_next_text", "glm5_next"})
# the older spellings configs still carry, for a model_type transformers does not know (a known one
# takes its config class's own: `spellings`)
KEY_ALIASES = {
    "hidden_size": ("n_embd", "n_embed", "d_model"),
    "num_attention_heads": ("n_head", "n_heads"),
    "num_hidden_layers": ("n_layer", "n_layers"),
    "max_position_embeddings": ("n_positions",),
}
# spellings a config class reads in __init__ rather than through attribute_map: Bloom pops `n_embed`
# into hidden_size (bigscience/bloom and bloomz-* spell their width so)
INIT_ALIASES = {"bloom": {"hidden_size": ("n_embed",)}}


def check_raw_config(raw: dict[str, Any]) -> None:
    """Types and presence of the size keys, in the decoder's own config (text_config if nested)."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    spelled = spellings(text.get("model_type"))
    attention_free = without_attention(text.get("model_type"))
    # a multimodal class's nested text config takes its class defaults for the keys it leaves out, and its
    # releases rely on them (llava-1.5's text_config names no width, head or layer count: LlamaConfig's 7B sizes)
    defaulted = text is not raw
    for key in POSITIVE_INT_KEYS:
        value = next((v for k in spelled[key] if (v := text.get(k)) is not None), None)
        derived = text.get(DERIVED_LAYER_COUNT.get(str(text.get("model_type")), "")) is not None
        counted = key == "num_hidden_layers" and (derived or any(text.get(k) for k in LAYER_COUNT_PATTERNS))
        headless = key == "num_attention_heads" and attention_free
        latent = key == "head_dim" and value == 0 and text.get("model_type") in ZERO_HEAD_DIM
        if (value is None and (key not in REQUIRED_KEYS or counted or headless or defaulted)) or latent:
            continue
        if value is None:
            raise InputError(f"config.json has no '{key}'; add the model's {key} (it sizes the graph)")
        if key == "intermediate_size" and isinstance(value, list) and value:  # one width per layer (Gemma-3n)
            value = min(value) if all(isinstance(v, int) and not isinstance(v, bool) for v in value) else value
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"config.json: '{key}' must be a positive integer, got {value!r}")
        if value > MAX_SIZE:  # a corrupt value: 2**64 layers overflowed a C long in the reading
            raise InputError(f"config.json: '{key}' is {value}, past any model's (at most {MAX_SIZE})")


def spellings(model_type: Any) -> dict[str, tuple[str, ...]]:
    """Every spelling of each size key a config of `model_type` may use, as its transformers config
    class reads them: the key, the attribute `attribute_map` maps it to or the alias it maps to it, the ones its
    __init__ reads (INIT_ALIASES); for a model_type transformers does not know, the common aliases
    (tests/model/test_raw_config.py checks each against the class itself)."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        attribute_map = getattr(CONFIG_MAPPING[model_type], "attribute_map", {})
    except (KeyError, ImportError, ValueError, TypeError):  # unknown: the common aliases
        return {key: (key, *KEY_ALIASES.get(key, ())) for key in POSITIVE_INT_KEYS}
    own = INIT_ALIASES.get(str(model_type), {})
    out = {key: (key, *own.get(key, ())) for key in POSITIVE_INT_KEYS}
    for key, stored in attribute_map.items():  # either side may be the size key: XGLM's hidden_size -> d_model,
        if not isinstance(stored, str):  # EXAONE's num_layers -> num_hidden_layers
            continue
        if key in out and stored not in out[key]:
            out[key] = (*out[key], stored)
        if stored in out and key not in out[stored]:
            out[stored] = (*out[stored], key)
    return out


def without_attention(model_type: Any) -> bool:
    """Whether transformers' config class for `model_type` has no attention heads at all, neither as
    a field nor through attribute_map: a stack of state mixers only (Mamba, Mamba2), whose config.json
    has no num_attention_heads to require (docs/hybrid-state.md §8.10)."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        cls = CONFIG_MAPPING[model_type]
    except (KeyError, ImportError, ValueError, TypeError):  # unknown: heads required
        return False
    if getattr(cls, "sub_configs", None):  # a multimodal config: its text_config has the heads
        return False
    return not hasattr(cls, "num_attention_heads") and "num_attention_heads" not in getattr(cls, "attribute_map", {})
