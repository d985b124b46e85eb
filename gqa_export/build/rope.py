"""Rotary embedding tables for GroupQueryAttention's fused RoPE (`do_rotary=1`).

GQA takes `cos_cache`/`sin_cache` of shape (max_positions, rotary_dim/2) and rotates the first
rotary_dim channels of each head (ort-ops.md §1.5: width % 8 == 0 and <= head_size/2). The
inverse frequencies follow transformers' `ROPE_INIT_FUNCTIONS`, computed in float32 as HF does,
so the tables equal HF's `cos/sin` up to float rounding.
"""

from __future__ import annotations

import math

import numpy as np

from gqa_export.build.dims import RopeConfig
from gqa_export.errors import InputError


def inv_freq_and_scale(rope: RopeConfig, max_position_embeddings: int) -> tuple[np.ndarray, float]:
    dim = rope.rotary_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (1.0 / (np.float32(rope.theta) ** exponent)).astype(np.float32)
    p = rope.params
    if rope.rope_type == "default":
        return inv_freq, 1.0
    if rope.rope_type == "linear":
        return (inv_freq / np.float32(p["factor"])).astype(np.float32), 1.0
    if rope.rope_type == "llama3":
        return _llama3(inv_freq, p, max_position_embeddings), 1.0
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


def cos_sin_tables(rope: RopeConfig, rows: int, max_position_embeddings: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 (rows, rotary_dim/2) tables: cos(pos * inv_freq) * attention scaling."""
    inv_freq, scale = inv_freq_and_scale(rope, max_position_embeddings)
    freqs = np.arange(rows, dtype=np.float32)[:, None] * inv_freq[None, :]
    return (np.cos(freqs) * np.float32(scale)).astype(np.float32), (np.sin(freqs) * np.float32(scale)).astype(
        np.float32
    )
