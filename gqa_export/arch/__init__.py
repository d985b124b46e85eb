"""Registry of architecture specs, keyed by the `arch` name recipes refer to."""

from __future__ import annotations

from gqa_export.arch.chunked_families import CHUNKED
from gqa_export.arch.classic_families import CLASSICS
from gqa_export.arch.families import ALL
from gqa_export.arch.hybrid_families import HYBRIDS
from gqa_export.arch.latent_families import LATENT_FAMILIES
from gqa_export.arch.spec import ArchSpec, LayerNames
from gqa_export.errors import InputError

SPECS: dict[str, ArchSpec] = {spec.name: spec for spec in (*ALL, *HYBRIDS, *CLASSICS, *LATENT_FAMILIES, *CHUNKED)}

__all__ = ["SPECS", "ArchSpec", "LayerNames", "get_spec"]


def get_spec(name: str) -> ArchSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise InputError(f"recipe asks for arch '{name}', which has no spec; known: {', '.join(SPECS)}") from None
