"""A family's spec as one config reads it: the fields its `config_choices` set by that config's values
(arch/spec_records.ConfigChoice). Molmo2's text config chooses Qwen3's per-head or OLMo's full-width q/k
norms (qk_norm_type "qwen3" / "olmo") and pre- or post-norm layers (norm_after), as its modeling code
branches on them; the build reads its dims, names and graph under the chosen spec."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.config_reads import config_get


def chosen_spec(spec: ArchSpec, config: Any) -> ArchSpec:
    """`spec` with each config choice's fields for the text `config`'s value of its key; a value the
    choice does not list (which the class refuses too) is refused in one line."""
    for choice in spec.config_choices:
        value = config_get(config, choice.config_key)
        fields = choice.options.get(value) if isinstance(value, (str, bool, int)) else None
        if fields is None:
            accepted = ", ".join(repr(v) for v in choice.options)
            raise InputError(
                f"{choice.config_key}={value!r} is not one the {spec.name} spec builds (it builds {accepted})"
            )
        spec = replace(spec, **fields)
    return spec
