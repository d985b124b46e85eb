"""Model dimensions and features read from an HF config, in one typed object.

Both rope spellings are read: transformers v5 `rope_parameters` and v4 `rope_scaling` +
`rope_theta` (the official builder crashed on configs for exactly this, ORT GenAI PR #2609).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


@dataclass(frozen=True)
class RopeConfig:
    rope_type: str
    theta: float
    rotary_dim: int
    params: dict[str, Any]  # the scaling parameters (factor, low_freq_factor, ...)


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
    attention_bias: bool
    mlp_bias: bool
    hidden_act: str
    rope: RopeConfig
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None

    @property
    def attention_scale(self) -> float:
        return float(self.head_dim) ** -0.5


def read_dims(config: Any, spec: ArchSpec, generation_config: dict[str, Any] | None) -> ModelDims:
    """Resolve a transformers config object into `ModelDims`, checking what the spec supports."""
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    rope = read_rope(config, head_dim)
    if rope.rope_type not in spec.rope_types:
        raise InputError(
            f"rope type '{rope.rope_type}' is not supported for {spec.name} (supported: {', '.join(spec.rope_types)})"
        )
    act = str(getattr(config, "hidden_act", "silu"))
    if act not in spec.activations:
        raise InputError(
            f"activation '{act}' is not supported for {spec.name} (supported: {', '.join(spec.activations)})"
        )
    gen = generation_config or {}
    eos = _ids(getattr(config, "eos_token_id", None)) + _ids(gen.get("eos_token_id"))
    bos = gen.get("bos_token_id", getattr(config, "bos_token_id", None))
    pad = gen.get("pad_token_id", getattr(config, "pad_token_id", None))
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
        rms_eps=float(getattr(config, "rms_norm_eps", 1e-6)),
        max_position_embeddings=int(getattr(config, "max_position_embeddings", 2048)),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        attention_bias=bool(getattr(config, "attention_bias", False)),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        hidden_act=act,
        rope=rope,
        bos_token_id=_first(bos),
        eos_token_ids=tuple(dict.fromkeys(eos)),
        pad_token_id=_first(pad),
    )


def read_rope(config: Any, head_dim: int) -> RopeConfig:
    params = getattr(config, "rope_parameters", None)
    if not params:
        params = dict(getattr(config, "rope_scaling", None) or {})
        if getattr(config, "rope_theta", None) is not None:
            params.setdefault("rope_theta", config.rope_theta)
    params = dict(params)
    rope_type = str(params.pop("rope_type", params.pop("type", "default")))
    theta = float(params.pop("rope_theta", getattr(config, "rope_theta", None) or 10000.0))
    partial = float(params.pop("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)))
    return RopeConfig(rope_type, theta, int(head_dim * partial), params)


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def _first(value: Any) -> int | None:
    ids = _ids(value)
    return ids[0] if ids else None
