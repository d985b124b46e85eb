"""Model dimensions and features read from an HF config, in one typed object.

Per-layer attention (window, which rope table) comes from `layer_types` where the config has it
(transformers v5 normalizes it for Qwen2/3, Gemma-2/3, SmolLM3), else a `sliding_window` applies
to every layer (Mistral, Phi-3). Both rope spellings are read: v5 `rope_parameters` (flat, or one
dict per layer type for Gemma-3) and v4 `rope_scaling` + `rope_theta` (the official builder
crashed on configs for exactly this, ORT GenAI PR #2609).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.recipes import ModelOptions

SLIDING = "sliding_attention"


@dataclass(frozen=True)
class RopeConfig:
    rope_type: str
    theta: float
    rotary_dim: int
    params: dict[str, Any]  # the scaling parameters (factor, low_freq_factor, ...)


@dataclass(frozen=True)
class LayerDims:
    window: int  # GQA local_window_size: keys attended incl. the current one; -1 = full
    rope: str | None  # key into ModelDims.ropes; None: a NoPE layer


@dataclass(frozen=True)
class ModelDims:
    model_type: str
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str
    ropes: dict[str, RopeConfig]
    layers: tuple[LayerDims, ...]
    attention_scale: float
    attn_softcap: float
    final_softcap: float
    embedding_multiplier: float
    residual_multiplier: float
    logits_divisor: float
    norm_offset: float
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None


def read_dims(config: Any, spec: ArchSpec, options: ModelOptions, generation: dict[str, Any] | None) -> ModelDims:
    """Resolve a transformers config object into `ModelDims`, checking what the spec supports."""
    keys = options.config_keys

    def opt(name: str, default: Any = None) -> Any:
        value = getattr(config, keys[name], None)
        return default if value is None else value

    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    ropes = read_ropes(config, head_dim)
    for rope in ropes.values():
        if rope.rope_type not in spec.rope_types:
            supported = ", ".join(spec.rope_types)
            raise InputError(f"rope type '{rope.rope_type}' is not supported for {spec.name} (supported: {supported})")
    act = str(opt("activation", "silu"))
    if act not in spec.activations:
        raise InputError(
            f"activation '{act}' is not supported for {spec.name} (supported: {', '.join(spec.activations)})"
        )
    query_scalar = opt("query_pre_attn_scalar")
    scale = (
        float(opt("attention_multiplier", 0.0)) or (float(query_scalar) if query_scalar else float(head_dim)) ** -0.5
    )
    embed_mult = {"none": 1.0, "sqrt_hidden": math.sqrt(hidden), "config": float(opt("embedding_multiplier", 1.0))}
    gen = generation or {}
    eos = token_ids(getattr(config, "eos_token_id", None)) + token_ids(gen.get("eos_token_id"))
    architectures = getattr(config, "architectures", None) or ["?"]
    return ModelDims(
        model_type=str(config.model_type),
        architecture=str(architectures[0]),
        hidden_size=hidden,
        intermediate_size=int(config.intermediate_size),
        num_layers=int(config.num_hidden_layers),
        num_heads=heads,
        num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
        head_dim=head_dim,
        vocab_size=int(config.vocab_size),
        rms_eps=float(getattr(config, "rms_norm_eps", None) or 1e-6),
        max_position_embeddings=int(getattr(config, "max_position_embeddings", 2048)),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        hidden_act=act,
        ropes=ropes,
        layers=_layers(config, opt, ropes),
        attention_scale=scale,
        attn_softcap=float(opt("attn_softcap", 0.0)),
        final_softcap=float(opt("final_softcap", 0.0)),
        embedding_multiplier=embed_mult[options.embedding_scale],
        residual_multiplier=float(opt("residual_multiplier", 1.0)),
        logits_divisor=float(opt("logits_scaling", 1.0)),
        norm_offset=options.norm_offset,
        bos_token_id=_first(gen.get("bos_token_id", getattr(config, "bos_token_id", None))),
        eos_token_ids=tuple(dict.fromkeys(eos)),
        pad_token_id=_first(gen.get("pad_token_id", getattr(config, "pad_token_id", None))),
    )


def _layers(config: Any, opt: Any, ropes: dict[str, RopeConfig]) -> tuple[LayerDims, ...]:
    n = int(config.num_hidden_layers)
    window = int(opt("sliding_window", 0) or 0)
    types = opt("layer_types")
    no_rope = opt("no_rope_layers")  # SmolLM3: 1 = this layer uses RoPE, 0 = NoPE
    out = []
    for i in range(n):
        layer_type = types[i] if types else None
        windowed = window > 0 and (layer_type == SLIDING if types else True)
        rope_key = layer_type if layer_type in ropes else "default"
        if no_rope is not None and not no_rope[i]:
            rope_key = None
        out.append(LayerDims(window if windowed else -1, rope_key))
    return tuple(out)


def read_ropes(config: Any, head_dim: int) -> dict[str, RopeConfig]:
    """One rope per key: "default", or one per layer type when the config splits them."""
    params = getattr(config, "rope_parameters", None)
    if params and all(isinstance(v, dict) for v in params.values()):
        return {key: read_rope(config, head_dim, value) for key, value in params.items()}
    return {"default": read_rope(config, head_dim)}


def read_rope(config: Any, head_dim: int, params: dict[str, Any] | None = None) -> RopeConfig:
    if params is None:
        params = getattr(config, "rope_parameters", None)
    if not params:
        params = dict(getattr(config, "rope_scaling", None) or {})
        if getattr(config, "rope_theta", None) is not None:
            params.setdefault("rope_theta", config.rope_theta)
    params = dict(params)
    rope_type = str(params.pop("rope_type", params.pop("type", "default")))
    theta = float(params.pop("rope_theta", getattr(config, "rope_theta", None) or 10000.0))
    partial = float(params.pop("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0))
    return RopeConfig(rope_type, theta, int(head_dim * partial), params)


def token_ids(value: Any) -> list[int]:
    """Token ids as configs spell them: absent, one int, or a list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def _first(value: Any) -> int | None:
    ids = token_ids(value)
    return ids[0] if ids else None
