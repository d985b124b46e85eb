"""Llama-3's RoPE scaling read back from the factors llama.cpp's converter stores.

A Llama-3.1/3.2 GGUF has no rope-scaling keys: the converter evaluates the llama3 formula once per
rotary frequency and stores the results as the `rope_freqs` tensor (llama.cpp divides each
frequency by its factor). The formula is 1 above the high-frequency boundary, `factor` below the
low-frequency one and 1 / ((1 - s) / factor + s) between them, with s linear in 1 / wavelength;
it depends on (factor, L / (hf - lf), lf / (hf - lf)) only, so any (original context L, lf, hf)
with those two ratios gives the same factors. They are fitted from the smooth-region entries
(L taken from rope.scaling.original_context_length, else Llama-3's 8192), and the fit is accepted
only when transformers' llama3 formula with them gives back every stored factor (docs/gguf.md §2.3).
"""

from __future__ import annotations

import math

import numpy as np

from gqa_export.errors import InputError

TOLERANCE = 1e-5  # relative, per factor (the file holds them in float32)


def llama3_factors(base: float, dim: int, factor: float, low: float, high: float, original: float) -> np.ndarray:
    """transformers' / llama.cpp's llama3 factors (the converter's loop, vectorized)."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    wavelen = 2 * math.pi / freqs
    smooth = (original / wavelen - low) / (high - low)
    middle = 1.0 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < original / high, 1.0, np.where(wavelen > original / low, factor, middle))


def llama3_scaling(stored: np.ndarray, base: float, dim: int, original: float | None, where: str) -> dict:
    """The rope_scaling dict whose llama3 factors are `stored` (module doc), else a refusal."""
    stored = np.asarray(stored, dtype=np.float64).reshape(-1)
    if stored.shape[0] != dim // 2:
        raise InputError(f"{where}: rope_freqs holds {stored.shape[0]} factors for a {dim}-wide head; not Llama-3's")
    factor = float(stored.max())
    original = float(original or 8192)
    wavelen = 2 * math.pi / (1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)))
    middle = (stored > 1 + TOLERANCE) & (stored < factor * (1 - TOLERANCE))
    if middle.sum() >= 2:  # s = 1/f - 1/factor over 1 - 1/factor, linear in 1 / wavelength: a / w - c
        s = (1 / stored[middle] - 1 / factor) / (1 - 1 / factor)
        a, minus_c = np.polyfit(1 / wavelen[middle], s, 1)
        low = -minus_c * original / a
        high = low + original / a
    else:  # no smooth entry: boundaries halfway between the last 1 and the first `factor` (same factors)
        ones, fulls = wavelen[stored <= 1 + TOLERANCE], wavelen[stored >= factor * (1 - TOLERANCE)]
        if not len(ones) or not len(fulls) or factor <= 1:
            raise InputError(
                f"{where}: rope_freqs factors do not follow Llama-3's scaling; this import does not read them"
            )
        edge = math.sqrt(ones.max() * fulls.min())
        low, high = original / (edge * 1.001), original / (edge * 0.999)
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": float(low), "high_freq_factor": float(high),
               "original_max_position_embeddings": int(original)}  # fmt: skip
    again = llama3_factors(base, dim, factor, low, high, original)
    if not np.allclose(again, stored, rtol=TOLERANCE, atol=0):
        raise InputError(f"{where}: rope_freqs factors do not follow Llama-3's scaling; this import does not read them")
    return scaling
