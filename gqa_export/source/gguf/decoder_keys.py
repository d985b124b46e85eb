"""The metadata keys every GGUF decoder has, read as llama.cpp reads them (source/gguf/config.py).

llama.cpp's defaults (rope.freq_base 10000, key_length hidden / heads, head_count_kv = heads), a
per-layer key that must hold one value, widths taken from tensor shapes where llama.cpp takes them.
"""

from __future__ import annotations

from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.gguf.container import GgufFile


def rope(f: GgufFile, config: dict[str, Any]) -> None:
    """rope_theta and rope_scaling as llama.cpp reads them (rope.freq_base default 10000)."""
    config["rope_theta"] = float(f.key("rope.freq_base", 10000.0))
    kind = f.key("rope.scaling.type")
    factor = f.key("rope.scaling.factor")
    if kind in (None, "none") or not factor or float(factor) == 1.0:
        return
    if kind == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(factor)}
        return
    if kind == "yarn":
        scaling: dict[str, Any] = {"rope_type": "yarn", "factor": float(factor)}
        original = f.key("rope.scaling.original_context_length")
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        for key, name in (("rope.scaling.yarn_beta_fast", "beta_fast"), ("rope.scaling.yarn_beta_slow", "beta_slow"),
                          ("rope.scaling.attn_factor", "attention_factor")):  # fmt: skip
            if f.key(key) is not None:
                scaling[name] = float(f.key(key))
        config["rope_scaling"] = scaling
        return
    raise InputError(f"{f.path.name}: rope scaling type {kind!r} is not read by gqa-export's GGUF import")


def one(f: GgufFile, key: str, default: Any = None) -> Any:
    """A key llama.cpp reads per layer or once: one value for the whole model, else a refusal."""
    value = f.key(key, default)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise InputError(
                f"{f.path.name}: {f.architecture}.{key} differs per layer ({sorted(set(value))}), which gqa-export's "
                "GGUF import does not map for this architecture"
            )
        value = value[0]
    return value


def decoder(f: GgufFile, config: dict[str, Any]) -> None:
    """The keys every GQA decoder has, with llama.cpp's defaults."""
    hidden = int(f.key("embedding_length"))
    heads = int(one(f, "attention.head_count"))
    config.update(
        hidden_size=hidden,
        num_hidden_layers=int(f.key("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(one(f, "attention.head_count_kv", heads)),
        max_position_embeddings=int(f.key("context_length", 4096)),
    )
    if f.key("feed_forward_length") is not None:
        config["intermediate_size"] = int(one(f, "feed_forward_length"))
    key_length = int(f.key("attention.key_length", hidden // heads))
    value_length = int(f.key("attention.value_length", key_length))
    if value_length != key_length:
        raise InputError(f"{f.path.name}: key_length {key_length} != value_length {value_length} is not imported")
    config["head_dim"] = key_length
    rope_dims = f.key("rope.dimension_count")
    if rope_dims is not None and int(rope_dims) != key_length:
        config["partial_rotary_factor"] = int(rope_dims) / key_length
    eps = f.key("attention.layer_norm_rms_epsilon")
    if eps is not None:
        config["rms_norm_eps"] = float(eps)
    rope(f, config)


def has(f: GgufFile, suffix: str) -> bool:
    return any(name.endswith(suffix) for name in f.tensors)


def rows(f: GgufFile, suffix: str, axis: int = 0) -> int:
    """A width llama.cpp takes from a tensor's shape (the converter writes 4 x hidden as Bloom's,
    Falcon's and GPT-2's feed_forward_length whatever the checkpoint's MLP is)."""
    tensor = next((t for n, t in f.tensors.items() if n.endswith(suffix)), None)
    if tensor is None:
        raise InputError(f"{f.path.name} has no *{suffix} tensor; it is not a complete model file")
    return int(tensor.shape[axis])


def layer_norm(f: GgufFile, config: dict[str, Any], key: str) -> None:
    eps = f.key("attention.layer_norm_epsilon")
    if eps is not None:
        config[key] = float(eps)
