"""Mixed-precision weights: which MatMuls get another bit width than the package's (`--mixed-precision`).

Selectors (choices.MIXED_SELECTORS) or fnmatch patterns on weight names, each with int4 or int8:
- `last_matmul`: the lm_head (a tied one shares the embedding's blobs, so the table follows).
- `sensitive_layers`: in the first and last eighth of the layers and every third layer between
  (llama.cpp's `use_more_bits` rule, integer division), attention V -- our packed QKV when the
  projections are packed -- and the MLP down projection: the tensors llama.cpp's Q4_K_M keeps wider.
8-bit MatMulNBits on CPU is as fast as 4-bit only at accuracy_level 4 (our CPU default).
"""

from __future__ import annotations

import fnmatch
import re

from gqa_export.choices import MIXED_SELECTORS, listing
from gqa_export.errors import InputError

_BITS = {"int4": 4, "int8": 8}
_LAYER = re.compile(r"layers\.(\d+)\.")
_SENSITIVE = ("v_proj.", "qkv_proj.", "down_proj.")


def parse_mixed(entries: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """`SELECTOR:int8` entries (comma-separated lists too) as (selector, bits); one line for a bad one."""
    out = []
    for entry in (part.strip() for item in entries for part in item.split(",") if part.strip()):
        selector, _, bits = entry.rpartition(":")
        if not selector or bits not in _BITS:
            raise InputError(
                f"--mixed-precision takes SELECTOR:int8 or SELECTOR:int4, got {entry!r} "
                f"(selectors: {listing(MIXED_SELECTORS)}, or a weight-name pattern)"
            )
        out.append((selector, _BITS[bits]))
    return tuple(out)


def use_more_bits(layer: int, num_layers: int) -> bool:
    """llama.cpp's rule: the first and last eighth, and every third layer in between."""
    eighth = num_layers // 8
    return layer < eighth or layer >= 7 * num_layers // 8 or (layer - eighth) % 3 == 2


def weight_bits(weights: dict[str, str], mixed: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """Weight name -> bit width for every weight an entry of `mixed` selects (later entries win).
    `weights`: the linear weights quantize.py would quantize, each with the name of its node."""
    if not mixed:
        return {}
    layers = [int(m.group(1)) for name in weights if (m := _LAYER.search(name))]
    num_layers = max(layers) + 1 if layers else 0
    bits: dict[str, int] = {}
    for selector, width in mixed:
        if selector == "last_matmul":
            chosen = [w for w, node in weights.items() if "lm_head" in w or "lm_head" in node]
        elif selector == "sensitive_layers":
            chosen = [
                w
                for w in weights
                if (m := _LAYER.search(w))
                and use_more_bits(int(m.group(1)), num_layers)
                and any(s in w for s in _SENSITIVE)
            ]
        else:
            chosen = [w for w in weights if fnmatch.fnmatch(w, selector)]
        if not chosen:
            raise InputError(f"--mixed-precision {selector} selects no weight of this model")
        bits.update(dict.fromkeys(chosen, width))
    return bits
