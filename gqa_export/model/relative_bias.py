"""The relative position bias's dimensions, read from the config (graph/relative_bias.py builds it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.config_reads import config_get
from gqa_export.model.layer_dims import LayerDims


@dataclass(frozen=True)
class RelativeBiasDims:
    """width: the relative states' width per head (d_rel); extents: each layer's backward distances that get a
    bias (a windowed layer's window, the others' the config's extent); log_floor / log_alpha: the full layers'
    queries and bias times 1 + alpha log(max((pos + 1) / floor, 1)) (floor 0: no such scaling)."""

    width: int
    extents: tuple[int, ...]
    log_floor: int = 0
    log_alpha: float = 0.0
    clips: tuple[float, float] = (0.0, 0.0)  # Inkling2's L2-clip thresholds: (queries and keys, relative states)


def relative_bias_dims(config: Any, spec: ArchSpec, layers: Sequence[LayerDims]) -> RelativeBiasDims | None:
    """The spec's relative bias read from `config` (None without one)."""
    names = spec.relative_bias
    if names is None:
        return None
    extent = int(config_get(config, names.extent))
    extents = tuple(layer.window if layer.window > 0 else extent for layer in layers)
    if min(extents) < 1:
        raise InputError(f"{spec.name}: {names.extent} and the sliding window must be at least 1 (got {extents})")
    floor = config_get(config, names.log_floor)
    return RelativeBiasDims(
        width=int(config_get(config, names.width)),
        extents=extents,
        log_floor=int(floor) if floor else 0,
        log_alpha=float(config_get(config, names.log_alpha) or 0.0),
        clips=(float(config_get(config, names.clipped.clip)), float(config_get(config, names.clipped.relative_clip)))
        if names.clipped is not None
        else (0.0, 0.0),
    )
