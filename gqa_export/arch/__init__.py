"""Registry of architecture specs, keyed by the `arch` name recipes refer to."""

from __future__ import annotations

import difflib

from gqa_export.arch.biased_routing_families import BIASED_ROUTED
from gqa_export.arch.cca_families import CCA_FAMILIES
from gqa_export.arch.chunked_families import CHUNKED
from gqa_export.arch.classic_derived_families import CLASSIC_DERIVED
from gqa_export.arch.classic_families import CLASSICS
from gqa_export.arch.derived_families import DERIVED
from gqa_export.arch.derived_moe_families import DERIVED_MOE
from gqa_export.arch.families import ALL
from gqa_export.arch.hybrid_families import HYBRIDS
from gqa_export.arch.latent_families import LATENT_FAMILIES
from gqa_export.arch.relative_bias_families import RELATIVE_BIAS_FAMILIES
from gqa_export.arch.shared_kv_families import SHARED_KV_FAMILIES
from gqa_export.arch.sigmoid_router_families import SIGMOID_ROUTED
from gqa_export.arch.spec import ArchSpec, LayerNames
from gqa_export.arch.state_space_families import STATE_SPACE
from gqa_export.arch.wrapped_families import WRAPPED_FAMILIES
from gqa_export.errors import InputError

SPECS: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        *ALL,
        *BIASED_ROUTED,
        *HYBRIDS,
        *CLASSICS,
        *LATENT_FAMILIES,
        *CHUNKED,
        *DERIVED,
        *STATE_SPACE,
        *DERIVED_MOE,
        *SIGMOID_ROUTED,
        *CLASSIC_DERIVED,
        *CCA_FAMILIES,
        *RELATIVE_BIAS_FAMILIES,
        *SHARED_KV_FAMILIES,
        *WRAPPED_FAMILIES,
    )
}

__all__ = ["SPECS", "ArchSpec", "LayerNames", "get_spec"]


def get_spec(name: str) -> ArchSpec:
    try:
        return SPECS[name]
    except KeyError:
        guess = difflib.get_close_matches(name, list(SPECS), n=1)
        hint = f"did you mean '{guess[0]}'? " if guess else ""
        raise InputError(
            f"recipe asks for arch '{name}', which has no spec ({hint}each built-in recipe's `arch`, shown by "
            "`gqa-export recipes show NAME`, is one)"
        ) from None
