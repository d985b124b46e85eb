"""Block-wise weight-only quantization in MatMulNBits' layout (docs/ort-ops.md §4).

A weight W [N, K] (HF Linear layout: one row per output) becomes, per row and per block of
`block_size` along K (K padded with zeros to a whole number of blocks):
- packed [N, k_blocks, block_size * bits / 8] uint8 (4-bit: element 2i in the low nibble),
- scales [N, k_blocks] (the activation dtype),
- zero_points [N, ceil(k_blocks * bits / 8)] uint8, only when asymmetric (symmetric uses the
  midpoint 2^(bits-1) implicitly).
Dequantized: (q - zero_point) * scale.

`rtn` runs onnxruntime's own C++ block quantizer (`quantize_matmul_4bits/8bits`, what
`MatMulNBitsQuantizer` uses). `search` minimizes each block's squared error over a grid of
clipped scales (symmetric only): it never does worse than rtn on a block, since the grid holds the
unclipped scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gqa_export.kernels import convert

SEARCH_GRID = np.linspace(0.70, 1.0, 16, dtype=np.float32)
# k_quant: candidate level counts around 2^bits - 1 (the plain min/max fit is the 11th); each
# candidate's scale is then refit by weighted least squares (llama.cpp's Q4_K idea, our own code).
K_QUANT_STEPS = np.arange(-1.0, 1.0, 0.1, dtype=np.float32)


@dataclass(frozen=True)
class NBitsConfig:
    bits: int = 4
    block_size: int = 32
    symmetric: bool = True
    method: str = "rtn"  # rtn | search | k_quant (asymmetric)

    def k_blocks(self, k: int) -> int:
        return (k + self.block_size - 1) // self.block_size

    def blob(self) -> int:
        return self.block_size * self.bits // 8

    def zp_cols(self, k: int) -> int:
        return (self.k_blocks(k) * self.bits + 7) // 8


def quantize_rows(w: np.ndarray, cfg: NBitsConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize rows of W [n, K] (float32). Returns (packed, scales float32, zero_points)."""
    n, k = w.shape
    if cfg.method == "search" and cfg.symmetric:
        return _search(w, cfg)
    if cfg.method == "k_quant":
        return _k_quant(w, cfg)
    from onnxruntime.capi import _pybind_state as ort_c

    kernel = {4: ort_c.quantize_matmul_4bits, 8: ort_c.quantize_matmul_8bits}[cfg.bits]
    blocks = cfg.k_blocks(k)
    weight = np.empty((blocks * cfg.block_size, n), dtype=np.float32)  # the kernel wants [K, N]
    weight[k:] = 0.0
    convert(w, np.dtype(np.float32), transpose=True, out=weight[:k])
    packed = np.zeros((n, blocks, cfg.blob()), dtype=np.uint8)
    scales = np.zeros((n, blocks), dtype=np.float32)
    zero_points = np.zeros((n, cfg.zp_cols(k)), dtype=np.uint8)
    kernel(packed, weight, scales, zero_points, cfg.block_size, n, k, cfg.symmetric)
    return packed, scales, zero_points


def _search(w: np.ndarray, cfg: NBitsConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, k = w.shape
    blocks = cfg.k_blocks(k)
    padded = np.zeros((n, blocks * cfg.block_size), dtype=np.float32)
    padded[:, :k] = w
    x = padded.reshape(n, blocks, cfg.block_size)
    qmax, mid = 2 ** (cfg.bits - 1) - 1, 2 ** (cfg.bits - 1)
    # ORT's symmetric convention: the element of largest magnitude maps to -2^(bits-1).
    idx = np.abs(x).argmax(axis=-1)[..., None]
    peak = np.take_along_axis(x, idx, axis=-1)[..., 0]
    base = peak / -mid
    best_err = np.full((n, blocks), np.inf, dtype=np.float32)
    best_scale = base.copy()
    for alpha in SEARCH_GRID:
        scale = base * alpha
        safe = np.where(scale == 0, 1.0, scale)[..., None]
        q = np.clip(np.round(x / safe), -mid, qmax)
        err = ((q * safe - x) ** 2).sum(-1)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_scale = np.where(better, scale, best_scale)
    safe = np.where(best_scale == 0, 1.0, best_scale)[..., None]
    q = (np.clip(np.round(x / safe), -mid, qmax) + mid).astype(np.uint8)
    packed = _pack(q, cfg.bits)
    return packed, best_scale.astype(np.float32), np.zeros((n, cfg.zp_cols(k)), dtype=np.uint8)


def _k_quant(w: np.ndarray, cfg: NBitsConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric blocks whose (scale, integer zero point) minimize an importance-weighted error.

    Importance of an element: rms(block) + |x| (large weights matter more, as in llama.cpp's
    k-quants). For each candidate level count c around 2^bits - 1: scale = range / c, zero point =
    round(-min / scale), levels q = round(x / scale) + zp; then the scale is refit for those levels
    by weighted least squares, s = sum(w d x) / sum(w d^2) with d = q - zp, and the candidate with
    the least weighted error wins. The integer zero point is part of the search (rounding a fitted
    real minimum afterwards would lose the gain)."""
    n, k = w.shape
    blocks = cfg.k_blocks(k)
    padded = np.zeros((n, blocks * cfg.block_size), dtype=np.float32)
    padded[:, :k] = w
    x = padded.reshape(n, blocks, cfg.block_size)
    qmax = float(2**cfg.bits - 1)
    importance = np.sqrt((x * x).mean(-1, keepdims=True)) + np.abs(x)
    lo, hi = np.minimum(x.min(-1), 0.0), np.maximum(x.max(-1), 0.0)
    span = np.where(hi > lo, hi - lo, 1.0)
    best = (
        np.full((n, blocks), np.inf, np.float32),
        np.zeros((n, blocks), np.float32),
        np.zeros((n, blocks), np.float32),
    )
    best_err, best_scale, best_zp = best
    best_grid = np.zeros((n, blocks), np.float32)
    for step in K_QUANT_STEPS:
        grid = span / (qmax + step)
        zp = np.clip(np.round(-lo / grid), 0, qmax)
        d = np.clip(np.round(x / grid[..., None]) + zp[..., None], 0, qmax) - zp[..., None]
        wd = importance * d
        den = (wd * d).sum(-1)
        scale = np.where(den > 0, (wd * x).sum(-1) / np.where(den > 0, den, 1.0), grid)
        err = (importance * (scale[..., None] * d - x) ** 2).sum(-1)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_scale = np.where(better, scale, best_scale)
        best_zp = np.where(better, zp, best_zp)
        best_grid = np.where(better, grid, best_grid)
    q = np.clip(np.round(x / best_grid[..., None]) + best_zp[..., None], 0, qmax).astype(np.uint8)
    return _pack(q, cfg.bits), best_scale.astype(np.float32), _pack_zero_points(best_zp.astype(np.uint8), cfg)


def _pack_zero_points(zp: np.ndarray, cfg: NBitsConfig) -> np.ndarray:
    """[n, k_blocks] zero points in MatMulNBits' per-row layout (4-bit: two a byte, low nibble first)."""
    if cfg.bits == 8:
        return zp
    if zp.shape[1] % 2:
        zp = np.concatenate([zp, np.zeros((zp.shape[0], 1), np.uint8)], axis=1)
    return (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    if bits == 8:
        return q
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def dequantize(
    packed: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, cfg: NBitsConfig
) -> np.ndarray:
    """W [n, K] back from the MatMulNBits blobs (for error reports and tests)."""
    n, blocks, _ = packed.shape
    if cfg.bits == 4:
        q = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, blocks, cfg.block_size).astype(np.float32)
    else:
        q = packed.astype(np.float32)
    if cfg.symmetric or zero_points is None:
        zp = np.full((n, blocks), 2 ** (cfg.bits - 1), dtype=np.float32)
    elif cfg.bits == 4:
        zp = np.stack([zero_points & 0x0F, zero_points >> 4], axis=-1).reshape(n, -1)[:, :blocks].astype(np.float32)
    else:
        zp = zero_points[:, :blocks].astype(np.float32)
    w = (q - zp[..., None]) * scales.astype(np.float32)[..., None]
    return w.reshape(n, blocks * cfg.block_size)[:, :k]
