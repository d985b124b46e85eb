"""ALiBi slopes (Bloom, MPT), read from a config: one slope per head, computed in float32 as HF
computes them. The bias the graph adds with them is graph/alibi.py's (docs/architecture.md §2.3).
"""

from __future__ import annotations

import math

import numpy as np

from gqa_export.errors import InputError

# transformers' MptModel builds its ALiBi with the default bias max whatever the config says
MPT_BIAS_MAX = 8


def alibi_slopes(kind: str, heads: int, bias_max: float = MPT_BIAS_MAX) -> tuple[float, ...]:
    """The per-head slopes, in float32 as HF computes them (arch.spec.ALIBI_SLOPES)."""
    if kind == "geometric":  # Press et al.: 2^(-8 i / n) for the closest power of two, then odd extras
        closest = 2 ** math.floor(math.log2(heads))
        base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 3))))
        slopes = [base ** np.float32(p) for p in range(1, closest + 1)]
        if closest != heads:
            extra = np.float32(2 ** (-(2 ** -(math.log2(2 * closest) - 3))))
            remaining = min(closest, heads - closest)
            slopes += [extra ** np.float32(p) for p in range(1, 2 * remaining, 2)]
        return tuple(float(np.float32(s)) for s in slopes)
    if kind == "bias_max":  # MPT: 1 / 2^(bias_max i / n2) over the next power of two n2, odd ones first
        if float(bias_max) != MPT_BIAS_MAX:
            raise InputError(
                f"alibi_bias_max {bias_max}: transformers' MPT always uses {MPT_BIAS_MAX} (the original code "
                "honours the config), so no export can match both; set alibi_bias_max to 8 or convert the model"
            )
        n2 = 2 ** math.ceil(math.log2(heads))
        base = np.arange(1, n2 + 1, dtype=np.int64).astype(np.float32) * np.float32(MPT_BIAS_MAX / n2)
        slopes = (np.float32(1.0) / np.power(np.float32(2), base)).astype(np.float32)
        if n2 != heads:
            slopes = np.concatenate([slopes[1::2], slopes[::2]])[:heads]
        return tuple(float(s) for s in slopes)
    raise InputError(f"unknown ALiBi slope kind '{kind}'")
