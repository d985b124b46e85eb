"""Which rotary table each layer reads, and the position-dependent query scale's parameters, read
from a config (model/dims.py assembles them into ModelDims; docs/architecture.md §2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.latent import LatentDims, LayerAttention
from gqa_export.model.rope import RopeConfig, read_rope, rope_params_by_type


class RopedLayer(Protocol):
    """What a layer's rope choice needs (model/dims.LayerDims has it)."""

    @property
    def rope(self) -> str | None: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def attention(self) -> LayerAttention | None: ...


def rope_keys(config: Any, spec: ArchSpec) -> set[str]:
    per_type = rope_params_by_type(config, spec.sliding_rope)
    return set(per_type) if per_type else {"default"}


def layer_ropes(
    config: Any, layers: Sequence[RopedLayer], spec: ArchSpec, latent: LatentDims | None = None
) -> dict[str, RopeConfig]:
    """One rope per key used by a layer, sized by the head_dim of the layers that use it."""
    out = {}
    per_type = rope_params_by_type(config, spec.sliding_rope)
    for key in sorted({layer.rope for layer in layers if layer.rope is not None}):
        dims = {layer.head_dim for layer in layers if layer.rope == key}
        if len(dims) > 1:
            raise InputError(f"layers with rope '{key}' have different head dims {sorted(dims)}; not supported")
        head_dim = dims.pop()
        params = per_type.get(key) if key != "default" and per_type else None
        if params is not None and spec.rope_partial_default is not None:
            params = {"partial_rotary_factor": spec.rope_partial_default, **params}
        if latent is not None:  # only the decoupled rope dims rotate, in the config's pair layout
            own = {own.latent.qk_rope for layer in layers if layer.rope == key and (own := layer.attention)}
            rope_dim = own.pop() if own else latent.qk_rope  # dots3-note's sliding layers: their own widths
            if params is not None:  # dots3-note: partial_rotary_factor = qk_rope / head_dim, i.e. rope_dim
                params = {k: v for k, v in params.items() if k != "partial_rotary_factor"}
            out[key] = replace(read_rope(config, rope_dim, params), interleaved=latent.interleaved)
            continue
        rope = read_rope(config, head_dim, params)
        out[key] = replace(rope, interleaved=spec.rope_interleaved, reversed=spec.rope_reversed)
    return out


def position_query_scale_params(config: Any) -> tuple[float, int]:
    """Ministral-3's position-dependent query scale, from its rope parameters (both keys required,
    as transformers' forward requires them)."""
    params = getattr(config, "rope_parameters", None) or {}
    beta, length = params.get("llama_4_scaling_beta"), params.get("original_max_position_embeddings")
    if beta is None or not length:
        raise InputError(
            "rope_parameters lacks llama_4_scaling_beta or original_max_position_embeddings, "
            "which this architecture's query scaling needs"
        )
    return float(beta), int(length)
