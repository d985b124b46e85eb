"""Tiny AMD Quark int4 checkpoints in Quark's real-quantized layout, and an independent reader.

A tiny random llama is quantized for real, per group of `group` consecutive input rows, the way
Quark's per-group int quantizers do: uint4 asymmetric (q = clamp(round(x/s) + z, 0, 15)) or int4
symmetric (z = 0, q = clamp(round(x/s), -8, 7)), fp16 scales. The writer follows Quark's export
as docs/prequantized.md §3.7 describes it: codes transposed to [K, N] and packed along N eight to an
int32 (nibble i of word c = column 8c + order[i]), scales transposed to [G, N], zero points packed
like the codes. `read_quark` is a separate numpy reader written from that description (not the
importer in gqa_export/source/quark.py); the twin is what it reads, checked equal to (q - z) * s.

    quark_pair(tmp, dtype="uint4", group=32, pack="reorder", layers=None, moe=None) -> (quantized, twin)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prequant_models import _write_pair

REORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def quantize(w: np.ndarray, dtype: str, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W [N, K] -> codes q [N, K], zero points z [N, G], fp16 scales s [N, G] (Quark's own signs)."""
    n, k = w.shape
    x = w.reshape(n, k // group, group)
    if dtype == "int4":
        s = (np.abs(x).max(-1) / 7.5).astype(np.float16)
        z = np.zeros(s.shape, np.int64)
        lo, hi = -8, 7
    else:
        mn, mx = np.minimum(x.min(-1), 0), np.maximum(x.max(-1), 0)
        s = ((mx - mn) / 15).astype(np.float16)
        z = np.clip(np.round(-mn / s.astype(np.float32)), 0, 15).astype(np.int64)
        lo, hi = 0, 15
    q = np.clip(np.round(x / s.astype(np.float32)[..., None]) + z[..., None], lo, hi).astype(np.int64)
    return q.reshape(n, k), z, s


def pack_along_last(values: np.ndarray, pack: str) -> np.ndarray:
    """[R, C] 4-bit integers (signed ones as two's-complement nibbles) -> int32 [R, ceil(C/8)]."""
    order = REORDER if pack == "reorder" else list(range(8))
    r, c = values.shape
    padded = np.zeros((r, -(-c // 8) * 8), np.uint64)
    padded[:, :c] = values.astype(np.int64) & 0xF
    v = padded.reshape(r, -1, 8)
    words = np.zeros(v.shape[:2], np.uint64)
    for i, col in enumerate(order):
        words |= v[:, :, col] << np.uint64(4 * i)
    return words.astype(np.uint32).view(np.int32)


def read_quark(weight: np.ndarray, scale: np.ndarray, zero: np.ndarray, dtype: str, pack: str) -> np.ndarray:
    """Independent reader: Quark's int32 words, scales [G, N], zero points -> float32 W [N, K]."""
    order = REORDER if pack == "reorder" else list(range(8))
    n = scale.shape[1]

    def unpack(words: np.ndarray) -> np.ndarray:
        out = np.zeros((words.shape[0], words.shape[1] * 8), np.int64)
        u = words.view(np.uint32).astype(np.int64)
        for i in range(8):
            out[:, order[i] :: 8] = (u >> (4 * i)) & 0xF
        if dtype == "int4":
            out = np.where(out >= 8, out - 16, out)
        return out[:, :n]

    group = weight.shape[0] // scale.shape[0]
    q, z = unpack(weight), np.repeat(unpack(zero), group, axis=0)
    wt = (q - z).astype(np.float32) * np.repeat(scale.astype(np.float32), group, axis=0)  # [K, N]
    return np.ascontiguousarray(wt.T)


def quark_config(dtype: str, group: int, pack: str, layers: dict[str, int] | None = None) -> dict[str, Any]:
    def weight(g: int) -> dict[str, Any]:
        return {"dtype": dtype, "qscheme": "per_group", "ch_axis": 1, "group_size": g, "symmetric": dtype == "int4",
                "is_dynamic": False, "round_method": "half_even", "scale_type": "float",
                "observer_cls": "PerGroupMinMaxObserver"}  # fmt: skip

    def layer(g: int) -> dict[str, Any]:
        return {"weight": weight(g), "input_tensors": None, "output_tensors": None, "bias": None,
                "target_device": None}  # fmt: skip

    return {
        "quant_method": "quark", "quant_mode": "eager_mode", "version": "0.10", "algo_config": None,
        "global_quant_config": layer(group),
        "layer_quant_config": {pattern: layer(g) for pattern, g in (layers or {}).items()},
        "layer_type_quant_config": {}, "kv_cache_quant_config": {}, "exclude": ["lm_head"],
        "export": {"kv_cache_group": [], "min_kv_scale": 0.0, "pack_method": pack,
                   "weight_format": "real_quantized", "weight_merge_groups": None},
    }  # fmt: skip


def quark_tensors(prefix: str, w: np.ndarray, dtype: str, group: int, pack: str) -> dict[str, np.ndarray]:
    q, z, s = quantize(w, dtype, group)
    tensors = {
        f"{prefix}.weight": pack_along_last(np.ascontiguousarray(q.T), pack),  # [K, N/8]
        f"{prefix}.weight_scale": np.ascontiguousarray(s.T),  # [G, N]
        f"{prefix}.weight_zero_point": pack_along_last(np.ascontiguousarray(z.T), pack),  # [G, N/8]
    }
    twin = read_quark(*tensors.values(), dtype, pack)
    direct = (q - np.repeat(z, group, axis=1)) * np.repeat(s.astype(np.float32), group, axis=1)
    assert np.array_equal(twin, direct.astype(np.float32)), prefix  # the reader agrees with the quantizer
    return {**tensors, "__twin__": twin}


def quark_pair(
    tmp: Path,
    dtype: str = "uint4",
    group: int = 32,
    pack: str = "reorder",
    layers: dict[str, int] | None = None,
    moe: str | None = None,
) -> tuple[Path, Path]:
    """`layers`: layer_quant_config patterns (fnmatch on the module name) -> their own group size;
    `moe`: a tests/moe_models.py model type (one quantized Linear per expert, the router float)."""
    import fnmatch

    def convert(prefix: str, w: np.ndarray, perm: np.ndarray) -> dict[str, np.ndarray]:
        g = next((g for p, g in (layers or {}).items() if fnmatch.fnmatch(prefix, p)), group)
        return quark_tensors(prefix, w, dtype, g, pack)

    return _write_pair(tmp, f"quark-{dtype}-g{group}-{pack}", quark_config(dtype, group, pack, layers), convert,
                       moe)  # fmt: skip
