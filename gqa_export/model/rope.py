"""Rotary embedding tables for GroupQueryAttention's fused RoPE (`do_rotary=1`).

GQA takes `cos_cache`/`sin_cache` of shape (max_positions, rotary_dim/2) and rotates the first
rotary_dim channels of each head (docs/ort-ops.md §1.6: width % 8 == 0 and <= head_size/2). The
inverse frequencies and attention factors follow transformers' `ROPE_INIT_FUNCTIONS`, computed in
float32 as HF does, so the tables equal HF's cos/sin up to float rounding.

- dynamic (NTK): HF recomputes frequencies only past max_position_embeddings; within the context
  length, which bounds max_length, it equals the default table.
- longrope: HF switches every position to the long factors once the sequence is longer than
  original_max_position_embeddings; `long_table` gives that second table (the graph picks one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gqa_export.errors import InputError


@dataclass(frozen=True)
class RopeConfig:
    rope_type: str
    theta: float
    rotary_dim: int
    params: dict[str, Any]  # the scaling parameters (factor, low_freq_factor, ...)
    interleaved: bool = False  # GPT-J style pairs (2i, 2i+1) instead of rotate-half (i, i + rotary/2)
    reversed: bool = False  # rotation by minus the angle (ArchSpec.rope_reversed): the sin table negated
    # an odd int(head_dim * partial_rotary_factor): transformers' frequencies theta^(-2j / it), j < its half
    # rounded up, rotating that many pairs (rotary_dim = it + 1 channels); None: rotary_dim itself
    frequency_dim: int | None = None


def read_rope(config: Any, head_dim: int, params: dict[str, Any] | None = None) -> RopeConfig:
    if params is None:
        params = getattr(config, "rope_parameters", None)
    if not params:
        params = dict(getattr(config, "rope_scaling", None) or {})
        if getattr(config, "rope_theta", None) is not None:
            params.setdefault("rope_theta", config.rope_theta)
    params = dict(params)
    rope_type = str(params.pop("rope_type", params.pop("type", "default")))
    original = getattr(config, "original_max_position_embeddings", None)
    if rope_type == "longrope" and "original_max_position_embeddings" not in params and original:
        # transformers 4.x (Phi-3): a top-level key, and then the factor is max / original
        params = {k: v for k, v in params.items() if k != "factor"}
        params["original_max_position_embeddings"] = int(original)
    theta = float(params.pop("rope_theta", getattr(config, "rope_theta", None) or 10000.0))
    # a partial_rotary_factor in the rope parameters decides over a stray rotary_dim attribute: transformers'
    # MiniMax-M2 config only fills it from rotary_dim when absent (setdefault), and its rotary reads it alone
    explicit = "partial_rotary_factor" in params
    partial = float(params.pop("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0))
    if rope_type == "proportional":  # Gemma-4: a full-width table whose tail frequencies are 0
        return RopeConfig(rope_type, theta, head_dim, {**params, "partial_rotary_factor": partial})
    # GPT-J / CodeGen spell the rotated width itself (None: all of it)
    rotary_dim = None if explicit else getattr(config, "rotary_dim", None)
    width = int(rotary_dim) if rotary_dim else int(head_dim * partial)
    if width > head_dim:  # an invalid graph otherwise (a Split of more channels than the head has)
        raise InputError(
            f"the config rotates {width} channels of each head (rotary_dim / partial_rotary_factor) but head_dim "
            f"is {head_dim}; fix rotary_dim or head_dim"
        )
    if width % 2 and width < head_dim and not rotary_dim:  # MiMo-V2-Flash's 0.334 of 40: 13 -> 7 pairs, 14 wide
        if rope_type not in ("default", "linear", "llama3", "dynamic") or params.get("alpha"):
            raise InputError(
                f"the config rotates an odd {width} channels of each head (int(head_dim x partial_rotary_factor)) "
                f"with rope type '{rope_type}'; only the default, linear, llama3 and dynamic types are exported so"
            )
        return RopeConfig(rope_type, theta, width + 1, params, frequency_dim=width)
    return RopeConfig(rope_type, theta, width, params)


def _base_inv_freq(rope: RopeConfig) -> np.ndarray:
    dim = rope.frequency_dim or rope.rotary_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (1.0 / (np.float32(rope.theta) ** exponent)).astype(np.float32)


def inv_freq_and_scale(rope: RopeConfig, max_position_embeddings: int, long: bool = False) -> tuple[np.ndarray, float]:
    inv_freq = _base_inv_freq(rope)
    p = rope.params
    if rope.rope_type == "dynamic" and p.get("alpha"):
        # HunYuan's NTK-alpha: a static base theta * alpha^(D/(D-2)) (transformers'
        # compute_ntk_alpha_rope_parameters; no dynamic rescaling)
        d = rope.rotary_dim
        base = float(rope.theta) * float(p["alpha"]) ** (d / (d - 2))
        exponent = np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / np.float32(d)
        return (1.0 / (np.float32(base) ** exponent)).astype(np.float32), 1.0
    if rope.rope_type in ("default", "dynamic"):
        return inv_freq, 1.0
    if rope.rope_type == "linear":
        return (inv_freq / np.float32(p["factor"])).astype(np.float32), 1.0
    if rope.rope_type == "llama3":
        return _llama3(inv_freq, p, max_position_embeddings), 1.0
    if rope.rope_type == "yarn":
        return _yarn(rope, max_position_embeddings)
    if rope.rope_type == "longrope":
        return _longrope(rope, max_position_embeddings, long)
    if rope.rope_type == "proportional":
        return _proportional(rope), 1.0
    raise InputError(f"rope type '{rope.rope_type}' has no table builder")


def _llama3(inv_freq: np.ndarray, p: dict, max_position_embeddings: int) -> np.ndarray:
    factor = float(p["factor"])
    low, high = float(p["low_freq_factor"]), float(p["high_freq_factor"])
    old_len = float(p.get("original_max_position_embeddings", max_position_embeddings))
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
    smooth = ((old_len / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(rope: RopeConfig, max_position_embeddings: int) -> tuple[np.ndarray, float]:
    p, dim, base = rope.params, rope.rotary_dim, rope.theta
    original = float(p.get("original_max_position_embeddings") or max_position_embeddings)
    factor = float(p.get("factor") or max_position_embeddings / original)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        m, m_all = p.get("mscale"), p.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    beta_fast, beta_slow = float(p.get("beta_fast") or 32), float(p.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
    pos_freqs = (np.float32(base) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))).astype(np.float32)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (np.float32(factor) * pos_freqs)
    keep = 1 - ramp
    return (interpolation * (1 - keep) + extrapolation * keep).astype(np.float32), float(attention)


def _longrope(rope: RopeConfig, max_position_embeddings: int, long: bool) -> tuple[np.ndarray, float]:
    p = rope.params
    original = float(p["original_max_position_embeddings"])
    factor = float(p.get("factor") or max_position_embeddings / original)
    attention = p.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = np.asarray(p["long_factor" if long else "short_factor"], dtype=np.float32)
    if "short_mscale" in p:
        # PhiMoE (transformers' PhimoeRotaryEmbedding): the short factors at every length; only the
        # scale switches to long_mscale past original_max_position_embeddings.
        ext = np.asarray(p["short_factor"], dtype=np.float32)
        attention = p["long_mscale" if long else "short_mscale"]
    shape = np.arange(0, rope.rotary_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(rope.rotary_dim)
    return (1.0 / (ext * np.float32(rope.theta) ** shape)).astype(np.float32), float(attention)


def _proportional(rope: RopeConfig) -> np.ndarray:
    """Gemma-4 global layers: the first int(p * D // 2) frequencies theta^(-2j/D) over the FULL head
    dim D, the rest 0 (cos 1, sin 0: those channel pairs pass through), all divided by `factor`
    (transformers' _compute_proportional_rope_parameters). Rotate-half over the whole head then
    equals HF, in GQA's fused RoPE too (docs/gemma4.md §2.1, option A)."""
    d = rope.rotary_dim
    angles = int(float(rope.params.get("partial_rotary_factor", 1.0)) * d // 2)
    exponent = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(d)
    rotated = (1.0 / (np.float32(rope.theta) ** exponent)).astype(np.float32)
    inv_freq = np.concatenate([rotated, np.zeros(d // 2 - angles, np.float32)])
    return (inv_freq / np.float32(rope.params.get("factor") or 1.0)).astype(np.float32)


def cos_sin_tables(
    rope: RopeConfig,
    rows: int,
    max_position_embeddings: int,
    long: bool = False,
    frequency_scale: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """float32 (rows, rotary_dim/2) tables: cos(pos * inv_freq) * attention scaling (sin negated for a
    reversed rotation); inv_freq times `frequency_scale` where a model learns one (Mistral-Large-4's LeRoPE)."""
    inv_freq, scale = inv_freq_and_scale(rope, max_position_embeddings, long)
    if frequency_scale is not None:
        if frequency_scale.shape != inv_freq.shape:
            raise InputError(
                f"the learned rope frequency scale has {frequency_scale.size} values for {inv_freq.size} frequencies"
            )
        inv_freq = (inv_freq * frequency_scale).astype(np.float32)
    freqs = np.arange(rows, dtype=np.float32)[:, None] * inv_freq[None, :]
    sin_scale = np.float32(-scale if rope.reversed else scale)
    return (np.cos(freqs) * np.float32(scale)).astype(np.float32), (np.sin(freqs) * sin_scale).astype(np.float32)


def longrope_switch(rope: RopeConfig) -> int | None:
    """The total length past which HF uses the long table (longrope only)."""
    if rope.rope_type != "longrope":
        return None
    return int(rope.params["original_max_position_embeddings"])


_SLIDING = "sliding_attention"


def rope_params_by_type(config: Any, sliding_rope: str | None) -> dict[str, dict[str, Any]] | None:
    """Per-layer-type rope parameters: transformers 5.x spells them as `rope_parameters` keyed by
    layer type. transformers 4.x configs have one `rope_theta` + `rope_scaling` and the family's
    modeling code derives the sliding layers' rope (`ArchSpec.sliding_rope`): Gemma-3 runs
    them unscaled at `rope_local_base_freq`, OLMo-3 unscaled at `rope_theta` (4.57's modeling code)."""
    params = _attr(config, "rope_parameters")
    # a null entry: that layer type has no RoPE where the family says so (spec rope_layers "typed")
    if params and all(isinstance(v, dict) or v is None for v in params.values()) and any(params.values()):
        return params
    types = _attr(config, "layer_types") or ()
    if params or sliding_rope is None or _SLIDING not in types:
        return None
    theta = _attr(config, "rope_theta") or 10000.0
    scaling = dict(_attr(config, "rope_scaling") or {})
    full = {**scaling, "rope_theta": theta} if scaling else {"rope_type": "default", "rope_theta": theta}
    local = _attr(config, "rope_local_base_freq") if sliding_rope == "local_base" else theta
    if local is None:
        return None
    return {"full_attention": full, _SLIDING: {"rope_type": "default", "rope_theta": float(local)}}


def _attr(config: Any, name: str) -> Any:
    """A config attribute or None; per-layer attributes of transformers >= 5.2x configs raise on
    global access (AmbiguousGlobalPerLayerAttributeError, a RuntimeError)."""
    try:
        return getattr(config, name, None)
    except RuntimeError:
        return None
