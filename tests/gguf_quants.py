"""Test-side GGML block encoders: float rows -> the bytes of each integer type.

Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 come from the `gguf` package's own quantizers. It has none for
the K-quants, so those are written here from ggml's block definitions (the inverse of the layouts
docs/gguf.md §3 lists, written without the reader in gqa_export/source/gguf/blocks.py): a plain
min/max fit per sub-block, 6-bit (or 4-bit) sub-block scales and mins relative to an fp16
super-block scale. They are not llama.cpp's optimized searches; the bytes are valid blocks of
the type, which is all a reader test needs (what the blocks mean is defined by the `gguf`
package's dequantizer, the reference every test compares against).
"""

from __future__ import annotations

import numpy as np

QK = 256


def quantize(x: np.ndarray, type_name: str) -> np.ndarray:
    """float32 [..., K] -> uint8 [..., K / weights per block * bytes per block]."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import quantize as gguf_quantize

    x = np.ascontiguousarray(x, dtype=np.float32)
    if type_name == "IQ4_NL":
        return iq4_nl(x).reshape(*x.shape[:-1], -1)
    if type_name in ENCODERS:
        rows = x.reshape(-1, QK)
        return ENCODERS[type_name](rows).reshape(*x.shape[:-1], -1)
    return gguf_quantize(x, GGMLQuantizationType[type_name])


def _f16(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the fp16 value as float32, its 2 bytes)."""
    h = v.astype(np.float16)
    return h.astype(np.float32), h.reshape(*h.shape, 1).view(np.uint8)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(b != 0, a / np.where(b != 0, b, 1), 0)


def _affine(x: np.ndarray, levels: int, scale_levels: int) -> tuple[np.ndarray, ...]:
    """x [n, subs, size] -> (q, sc, m, d bytes, dmin bytes): w = d sc q - dmin m, sc / m integers
    in [0, scale_levels], q in [0, levels]."""
    lo, hi = np.minimum(x.min(-1), 0), np.maximum(x.max(-1), 0)
    scale, minv = (hi - lo) / levels, -lo
    d, d_raw = _f16(scale.max(-1, keepdims=True) / scale_levels)
    dmin, dmin_raw = _f16(minv.max(-1, keepdims=True) / scale_levels)
    sc = np.clip(np.round(_safe_div(scale, d)), 0, scale_levels).astype(np.uint8)
    m = np.clip(np.round(_safe_div(minv, dmin)), 0, scale_levels).astype(np.uint8)
    s, mm = (d * sc)[..., None], (dmin * m)[..., None]
    q = np.clip(np.round(_safe_div(x + mm, s)), 0, levels).astype(np.uint8)
    return q, sc, m, d_raw.reshape(-1, 2), dmin_raw.reshape(-1, 2)


def _k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """8 six-bit scales and mins -> the 12 bytes ggml's get_scale_min_k4 reads."""
    low = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    mid = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    high = (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4)
    return np.concatenate([low, mid, high], axis=1).astype(np.uint8)


def _k_nibbles(q: np.ndarray) -> np.ndarray:
    """[n, 256] 4-bit -> 128 bytes: byte c*32 + i = q[c*64 + i] | q[c*64 + 32 + i] << 4."""
    q = q.reshape(-1, 4, 2, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128).astype(np.uint8)


def _bitplanes(bits: np.ndarray, planes: int) -> np.ndarray:
    """[n, planes * 32] of 0/1 -> 32 bytes: bit b of byte i = element b * 32 + i."""
    b = bits.reshape(-1, planes, 32).astype(np.uint8)
    return sum((b[:, p] << p) for p in range(planes)).astype(np.uint8)


def _crumbs(q: np.ndarray) -> np.ndarray:
    """[n, 256] 2-bit -> 64 bytes: element h*128 + s*32 + i at bits 2s of byte h*32 + i."""
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)
    return sum((q[:, :, s] << (2 * s)) for s in range(4)).reshape(-1, 64).astype(np.uint8)


def q4_k(x: np.ndarray) -> np.ndarray:
    q, sc, m, d, dmin = _affine(x.reshape(-1, 8, 32), 15, 63)
    return np.concatenate([d, dmin, _k_scales(sc, m), _k_nibbles(q.reshape(-1, 256))], axis=1)


def q5_k(x: np.ndarray) -> np.ndarray:
    q, sc, m, d, dmin = _affine(x.reshape(-1, 8, 32), 31, 63)
    q = q.reshape(-1, 256)
    qh = _bitplanes(q >> 4, 8)
    return np.concatenate([d, dmin, _k_scales(sc, m), qh, _k_nibbles(q & 0x0F)], axis=1)


def q2_k(x: np.ndarray) -> np.ndarray:
    q, sc, m, d, dmin = _affine(x.reshape(-1, 16, 16), 3, 15)
    return np.concatenate([(sc | (m << 4)).astype(np.uint8), _crumbs(q.reshape(-1, 256)), d, dmin], axis=1)


def _symmetric(x: np.ndarray, low: int, high: int, scale_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [n, subs, size] -> (v in [low, high], integer scales in [-scale_max, scale_max], d bytes)."""
    idx = np.abs(x).argmax(-1)[..., None]
    peak = np.take_along_axis(x, idx, -1)[..., 0]
    scale = peak / low  # the largest magnitude maps to `low` (negative end), as ggml does
    big = np.abs(scale).max(-1, keepdims=True)
    d, d_raw = _f16(big / scale_max)
    sc = np.clip(np.round(_safe_div(scale, d)), -scale_max, scale_max)
    v = np.clip(np.round(_safe_div(x, (d * sc)[..., None])), low, high).astype(np.int16)
    return v, sc.astype(np.int16), d_raw.reshape(-1, 2)


def q6_k(x: np.ndarray) -> np.ndarray:
    v, sc, d = _symmetric(x.reshape(-1, 16, 16), -32, 31, 127)
    q = (v.reshape(-1, 256) + 32).astype(np.uint8)
    low, high = q & 0x0F, q >> 4
    ql = low.reshape(-1, 2, 2, 64)
    ql = (ql[:, :, 0] | (ql[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([ql, _crumbs(high), sc.astype(np.int8).view(np.uint8), d], axis=1).astype(np.uint8)


def q3_k(x: np.ndarray) -> np.ndarray:
    v, sc, d = _symmetric(x.reshape(-1, 16, 16), -4, 3, 31)
    v = v.reshape(-1, 256)
    hmask = _bitplanes((v >= 0).astype(np.uint8), 8)
    qs = _crumbs((v & 3).astype(np.uint8))
    s = (sc + 32).astype(np.uint8)  # [n, 16] six-bit
    low = (s[:, :8] & 0x0F) | ((s[:, 8:] & 0x0F) << 4)
    high = sum(((s[:, 4 * p : 4 * p + 4] >> 4) & 3) << (2 * p) for p in range(4)).astype(np.uint8)
    return np.concatenate([hmask, qs, low, high, d], axis=1).astype(np.uint8)


IQ4_NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def iq4_nl(x: np.ndarray) -> np.ndarray:
    """IQ4_NL (blocks of 32): [d f16][16 bytes], weight j the low nibble of byte j, j + 16 the high
    one, each indexing a fixed non-uniform level table: w = d * level."""
    b = x.reshape(-1, 32)
    d, d_raw = _f16(np.abs(b).max(-1) / 127)
    idx = np.abs(_safe_div(b, d[:, None])[..., None] - IQ4_NL_LEVELS).argmin(-1).astype(np.uint8)
    return np.concatenate([d_raw.reshape(-1, 2), idx[:, :16] | (idx[:, 16:] << 4)], axis=1).astype(np.uint8)


ENCODERS = {"Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k}
