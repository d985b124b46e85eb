"""Block-wise weight-only quantization in MatMulNBits' layout (ort-ops.md §3.5).

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


@dataclass(frozen=True)
class NBitsConfig:
    bits: int = 4
    block_size: int = 32
    symmetric: bool = True
    method: str = "rtn"  # rtn | search

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
