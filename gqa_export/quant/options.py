"""The int4/int8 options of a build or `quantize`, as the command line gives them."""

from __future__ import annotations

from gqa_export.errors import InputError
from gqa_export.request.records import QuantOptions
from gqa_export.request.table import OPTIONS


def refuse_on_float(precision: str, quant: QuantOptions | None) -> None:
    """A float build has no quantization to apply the int4/int8 options to: name the first one set
    (its flag from the option declarations)."""
    if quant is None:
        return
    default = QuantOptions()
    for option in OPTIONS:
        record, _, name = option.field.partition(".")
        if record == "quant" and getattr(quant, name) != getattr(default, name):
            raise InputError(
                f"{option.flags[0]} applies to int4/int8 packages, not --precision {precision}; "
                "drop it or choose int4/int8"
            )
