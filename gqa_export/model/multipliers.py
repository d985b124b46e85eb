"""Config constants that scale one Linear's input or output (the spec's `Multiplier`s: Falcon-H1's
µP multipliers), resolved once per model and applied by `graph.blocks.linear` as Mul nodes in the
order HF computes them (docs/hybrid-state.md §8.4).

A resolved multiplier is a tuple of (width, value) segments over the Linear's output channels;
width 0 means every channel (one scalar). Input multipliers are always one scalar.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gqa_export.arch.mixer_spec import Multiplier
from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.layer_kinds import Mamba2Dims

Segments = tuple[tuple[int, float], ...]
Resolved = Mapping[tuple[str, str], Segments]  # (module, side) -> segments


def resolve_multipliers(config: Any, spec: ArchSpec, mamba2: Mamba2Dims | None) -> Resolved:
    """Each of the spec's multipliers with its config value; those equal to 1 everywhere are left
    out (they add no node). A missing key means 1, as the config classes default it."""
    out: dict[tuple[str, str], Segments] = {}
    for m in spec.multipliers:
        value = getattr(config, m.key, None)
        if value is None:
            continue
        segments = _segments(m, value, spec, mamba2)
        if any(v != 1.0 for _, v in segments):
            out[(m.module, m.side)] = segments
    return out


def _segments(m: Multiplier, value: Any, spec: ArchSpec, mamba2: Mamba2Dims | None) -> Segments:
    if m.segments is None:
        scalar = value[m.index] if m.index is not None else value
        return ((0, float(scalar)),)
    widths = _SEGMENT_WIDTHS[m.segments](mamba2)
    values = [float(v) for v in value]
    if len(values) != len(widths):
        raise InputError(f"{spec.name}: {m.key} has {len(values)} entries; the {m.segments} split has {len(widths)}")
    return tuple(zip(widths, values, strict=True))


def _mamba2_widths(m: Mamba2Dims | None) -> tuple[int, ...]:
    """The Mamba2 in_proj's output split, z | x | B | C | dt."""
    assert m is not None, "a Mamba2 multiplier on a model without Mamba2 layers"
    group_width = m.groups * m.state
    return m.inner, m.inner, group_width, group_width, m.heads


_SEGMENT_WIDTHS: dict[str, Callable[[Mamba2Dims | None], tuple[int, ...]]] = {"mamba2": _mamba2_widths}


def residual_multiplier(opt: Callable[..., Any], spec: ArchSpec, num_layers: int) -> float:
    """What each block's output is multiplied by before the residual add (spec residual_scale):
    Granite's residual_multiplier, or MiniCPM3's scale_depth / sqrt(num_hidden_layers), which its
    decoder layer computes once in double precision (a config without scale_depth: 1)."""
    if spec.residual_scale == "depth":
        depth = opt("depth_scale")
        return 1.0 if depth is None else float(depth) / math.sqrt(num_layers)
    return float(opt("residual_multiplier", 1.0))


def embedding_multiplier(opt: Callable[..., Any], spec: ArchSpec, hidden: int) -> float:
    """What the token embeddings are multiplied by (spec embedding_scale): sqrt(hidden_size) (Gemma),
    the config's embedding_multiplier (Granite; MiniCPM3's scale_emb), sqrt(hidden_size) where the
    config switches it on (AFMoE's mup_enabled), sqrt(hidden_size) rounded to bfloat16
    (RecurrentGemma), or nothing."""
    if spec.embedding_scale == "sqrt_hidden":  # BioGPT's / XGLM's scale_embedding false: unscaled
        return math.sqrt(hidden) if opt("embedding_sqrt_switch", True) is not False else 1.0
    if spec.embedding_scale == "sqrt_hidden_bf16":  # RecurrentGemma: its normalizer is a bfloat16 buffer
        return bfloat16(math.sqrt(hidden))
    if spec.embedding_scale == "sqrt_hidden_if_configured":  # AFMoE: muP's input scaling when mup_enabled
        return math.sqrt(hidden) if opt("embedding_sqrt_switch", False) else 1.0
    if spec.embedding_scale in ("config", "config_in_table"):
        return float(opt("embedding_multiplier", 1.0))
    return 1.0


def bfloat16(value: float) -> float:
    """value rounded to the nearest bfloat16 (ties to even), as torch.tensor(value, dtype=torch.bfloat16)
    rounds it: float32's upper 16 bits after rounding the lower 16."""
    bits = int(np.asarray(value, dtype=np.float32).view(np.uint32))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(np.asarray(bits, dtype=np.uint32).view(np.float32))
