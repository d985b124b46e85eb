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


# a layer's own RoPE base (the config's layer_rope_theta): the key of its table, the base's repr after it
_THETA_KEY = "rope_theta_"
# the table of the layers a config's rope_scaling_layers leaves out: the default rope at rope_parameters'
# theta, without its scaling (Molmo2's rotary_emb_unscaled)
UNSCALED = "unscaled"


def theta_rope_key(config: Any, theta: float) -> str | None:
    """The rope key of a layer whose config gives it its own RoPE base (GraniteSWA's layer_rope_theta):
    None for 0 (the layer runs without RoPE), "default" for the global rope_theta, else a key of its
    own whose table is the global rope with that base."""
    if not theta:
        return None
    params = getattr(config, "rope_parameters", None) or {}
    if float(params.get("rope_theta", getattr(config, "rope_theta", None) or 10000.0)) == theta:
        return "default"
    return f"{_THETA_KEY}{float(theta)!r}"


def projected_head_dim(spec: ArchSpec, cache_head_dim: int) -> int:
    """The q/k/v projections' head_dim of a layer whose cache heads are `cache_head_dim` wide: the same,
    but half for differential attention and 16 less for dynamic mask attention (graph/differential.py,
    graph/dynamic_mask.py)."""
    if spec.differential_attention:
        return cache_head_dim // 2
    return cache_head_dim - 16 if spec.dynamic_key_bias else cache_head_dim


def cache_head_dim(spec: ArchSpec, head_dim: int) -> int:
    """The cache heads' width of a layer whose projections have `head_dim`: DiffLlama's [q k | 0] keys and
    [V1 | V2] values are twice as wide, Doge's exp(dt) [v | 1 | 0] 16 wider (the inverse of the above)."""
    if spec.differential_attention:
        return 2 * head_dim
    return head_dim + 16 if spec.dynamic_key_bias else head_dim


def layer_thetas(thetas: Sequence[float] | None, layers: int) -> Sequence[float] | None:
    """The config's layer_rope_theta (one RoPE base per layer, GraniteSWA), checked to have one per layer."""
    if thetas is not None and len(thetas) != layers:
        raise InputError(f"layer_rope_theta has {len(thetas)} entries for {layers} layers; give one per layer")
    return thetas


def rope_keys(config: Any, spec: ArchSpec) -> set[str]:
    per_type = rope_params_by_type(config, spec.sliding_rope)
    return set(per_type) if per_type else {"default"}


def nope_types(config: Any, spec: ArchSpec) -> set[str]:
    """Layer types whose rope_parameters entry is null, which then go without RoPE (spec rope_layers
    "typed": Cohere-Compass's rotary embedding skips a type without parameters)."""
    per_type = rope_params_by_type(config, spec.sliding_rope) if spec.rope_layers == "typed" else None
    return {layer_type for layer_type, params in (per_type or {}).items() if params is None}


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
        head_dim = projected_head_dim(spec, dims.pop())  # DiffLlama / Doge: RoPE on the projections' D
        params = per_type.get(key) if key != "default" and per_type else None
        if key.startswith(_THETA_KEY):  # the global rope at the layer's own base
            base = getattr(config, "rope_parameters", None) or {}
            params = {**base, "rope_theta": float(key[len(_THETA_KEY) :])}
        if key == UNSCALED:
            params = unscaled_params(config)
        if params is not None and spec.rope_partial_default is not None:
            params = {"partial_rotary_factor": spec.rope_partial_default, **params}
        if spec.default_rope_whole_head:
            params = _whole_head_if_default(config, params)
        if latent is not None:  # only the decoupled rope dims rotate, in the config's pair layout
            own = {own.latent.qk_rope for layer in layers if layer.rope == key and (own := layer.attention)}
            rope_dim = own.pop() if own else latent.qk_rope  # dots3-note's sliding layers: their own widths
            # dots3-note's per-type and Mistral-4's global rope parameters hold partial_rotary_factor = qk_rope /
            # head_dim, i.e. rope_dim itself (Mistral4Config sets it when the config lacks it)
            if params is None and "partial_rotary_factor" in (getattr(config, "rope_parameters", None) or {}):
                params = dict(config.rope_parameters)
            if params is not None:
                params = {k: v for k, v in params.items() if k != "partial_rotary_factor"}
            out[key] = replace(read_rope(config, rope_dim, params), interleaved=latent.interleaved)
            continue
        rope = read_rope(config, head_dim, params)
        theta = rope.theta if spec.fixed_rope_theta is None else spec.fixed_rope_theta  # a stray rope_theta: unread
        out[key] = replace(rope, theta=theta, interleaved=spec.rope_interleaved, reversed=spec.rope_reversed)
    return out


def unscaled_params(config: Any) -> dict[str, Any]:
    """The rope parameters of a layer outside rope_scaling_layers: the default rope at the config's theta
    (and rotated share), none of its scaling's keys (Molmo2's `Molmo2RotaryEmbedding(scaled=False)`)."""
    base = getattr(config, "rope_parameters", None) or {}
    theta = base.get("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    kept = {k: base[k] for k in ("partial_rotary_factor",) if k in base}
    return {"rope_type": "default", "rope_theta": float(theta), **kept}


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


def _whole_head_if_default(config: Any, params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The rope parameters with the whole head rotated where the rope type is the default one, whose
    init function in the class ignores partial_rotary_factor (ArchSpec.default_rope_whole_head)."""
    base = params if params is not None else getattr(config, "rope_parameters", None)
    if not base or str(base.get("rope_type", base.get("type", "default"))) != "default":
        return params
    return {**base, "partial_rotary_factor": 1.0}
