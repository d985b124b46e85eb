"""Tiny pre-quantized checkpoints in the real on-disk layouts, and their dequantized float twins.

A tiny random llama (tests/tiny_models.py) is quantized for real: per group of input rows, an
asymmetric (or symmetric) round-to-nearest fit with fp16 scales, groups taken in a random input
order when act-order is asked. The integers are then written the way each format stores them
(written here from the formats' definitions, docs/prequantized.md §3; not shared with the reader
in gqa_export/source/native.py). The twin holds (q - z) * s in fp32 as plain `P.weight`: what
the quantized checkpoint means, which HF transformers runs as an ordinary model.

    gptq_pair(tmp, bits=4, group=32, act_order=True, sym=False, v2=False) -> (quantized, twin)
    awq_pair(tmp, group=32) -> (quantized, twin)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from tiny_models import save_llama

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")
# which linears read the same activations (one act-order permutation each, as GPTQ's shared Hessian gives;
# each MoE expert its own, Mixtral's w1/w3 being gate/up)
SHARED_INPUT = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gu", "up_proj": "gu", "w1": "gu",
                "w3": "gu"}  # fmt: skip
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def quantize(w: np.ndarray, bits: int, group: int, g_idx: np.ndarray, sym: bool) -> tuple[np.ndarray, ...]:
    """RTN of W [N, K] per (row, group): q [N, K], zero [G, N], scale fp16 [G, N] (G = ceil(K / group): GPTQ's
    last group holds the K % group rows left where K is not whole groups)."""
    n, k = w.shape
    groups = int(g_idx.max()) + 1
    q = np.zeros((n, k), np.int64)
    zeros = np.zeros((groups, n), np.int64)
    scales = np.zeros((groups, n), np.float16)
    top = 2**bits - 1
    for g in range(groups):
        cols = np.nonzero(g_idx == g)[0]
        x = w[:, cols]
        if sym:
            s = (np.abs(x).max(1) / (2 ** (bits - 1) - 0.5)).astype(np.float16)
            z = np.full(n, 2 ** (bits - 1))
        else:
            lo, hi = np.minimum(x.min(1), 0), np.maximum(x.max(1), 0)
            s = ((hi - lo) / top).astype(np.float16)
            z = np.clip(np.round(-lo / s.astype(np.float32)), 0, top).astype(np.int64)
        sf = s.astype(np.float32)[:, None]
        q[:, cols] = np.clip(np.round(x / sf) + z[:, None], 0, top)
        zeros[g], scales[g] = z, s
    return q, zeros, scales


def dequantize(q: np.ndarray, zeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray) -> np.ndarray:
    return ((q - zeros.T[:, g_idx]) * scales.astype(np.float32).T[:, g_idx]).astype(np.float32)


def pack_words(values: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Integers packed 32/bits to an int32 word along `axis`, field j at bits [bits*j, bits*j+bits)."""
    v = np.moveaxis(values.astype(np.uint64) & (2**bits - 1), axis, 0)
    per = 32 // bits
    v = v.reshape(v.shape[0] // per, per, *v.shape[1:])
    words = np.zeros((v.shape[0], *v.shape[2:]), np.uint64)
    for j in range(per):
        words |= v[:, j] << np.uint64(bits * j)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), 0, axis)


def awq_pack(values: np.ndarray) -> np.ndarray:
    """[R, N] 4-bit integers -> int32 [R, N/8], nibble i of word c holding column 8c + AWQ_ORDER[i]."""
    r, n = values.shape
    v = values.astype(np.uint64).reshape(r, n // 8, 8)
    words = np.zeros((r, n // 8), np.uint64)
    for i, col in enumerate(AWQ_ORDER):
        words |= v[:, :, col] << np.uint64(4 * i)
    return words.astype(np.uint32).view(np.int32)


def _write_pair(tmp: Path, name: str, qc: dict, convert, moe: str | None = None) -> tuple[Path, Path]:
    """`moe`: a tests/moe_models.py model type (per-expert hub layout, 2 layers: one MoE, one dense)."""
    if moe is None:
        base = save_llama(tmp / f"{name}-float")
    else:
        from moe_models import save_moe

        dense_layer = {"mlp_only_layers": [1]} if moe == "qwen3_moe" else {}
        base = save_moe(tmp / f"{name}-float", moe, num_hidden_layers=2, **dense_layer)
    tensors = load_file(base / "model.safetensors")
    quantized, twin = dict(tensors), dict(tensors)
    rng = np.random.default_rng(7)
    perms: dict[str, np.ndarray] = {}
    for key in sorted(tensors):
        proj = key.split(".")[-2]
        if proj not in LINEARS or not key.endswith(".weight"):
            continue
        prefix = key.removesuffix(".weight")
        w = tensors[key].astype(np.float32)
        shared = f"{prefix.rsplit('.', 1)[0]}.{SHARED_INPUT.get(proj, proj)}"
        perm = perms.setdefault(shared, rng.permutation(w.shape[1]))
        del quantized[key]
        quantized.update(convert(prefix, w, perm))
        twin[key] = quantized.pop("__twin__")
    return save_pair(tmp, name, base, quantized, twin, qc)


def _save_numpy(tensors: dict, path: str) -> None:
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata={"format": "pt"})


def save_pair(
    tmp: Path, name: str, base: Path, quantized: dict, twin: dict, qc: dict, save_quantized=None
) -> tuple[Path, Path]:
    """tmp/name (the quantized tensors, config.json with `qc` as its quantization_config) and
    tmp/name-twin (the dequantized float tensors), each a copy of the float checkpoint `base` with
    its model.safetensors replaced. `save_quantized(tensors, path)` writes tensors numpy cannot
    hold (float8: safetensors' torch writer); numpy arrays are made contiguous (a strided view is
    written in the wrong order without an error)."""
    out_q, out_t = tmp / name, tmp / f"{name}-twin"
    for out in (out_q, out_t):
        shutil.copytree(base, out)
    (save_quantized or _save_numpy)(quantized, str(out_q / "model.safetensors"))
    _save_numpy(twin, str(out_t / "model.safetensors"))
    config = json.loads((out_q / "config.json").read_text())
    config["quantization_config"] = qc
    (out_q / "config.json").write_text(json.dumps(config))
    return out_q, out_t


def gptq_pair(
    tmp: Path,
    bits: int = 4,
    group: int = 32,
    act_order: bool = True,
    sym: bool = False,
    v2: bool = False,
    moe: str | None = None,
) -> tuple[Path, Path]:
    qc = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": sym,
          "checkpoint_format": "gptq_v2" if v2 else "gptq"}  # fmt: skip

    def convert(prefix: str, w: np.ndarray, perm: np.ndarray) -> dict[str, np.ndarray]:
        k = w.shape[1]
        size = k if group <= 0 else group  # -1: one group per output row
        g_idx = np.arange(k) // size
        if act_order:  # perm[t] is the t-th row GPTQ quantized: groups follow that order
            g_idx = np.empty(k, np.int64)
            g_idx[perm] = np.arange(k) // size
        q, zeros, scales = quantize(w, bits, size, g_idx, sym)
        stored_zeros = zeros if v2 else zeros - 1  # v1 stores zero - 1 (AutoGPTQ's pack)
        return {
            f"{prefix}.qweight": pack_words(q.T, bits, axis=0),  # [K*b/32, N], along K
            f"{prefix}.qzeros": pack_words(stored_zeros, bits, axis=1),  # [G, N*b/32], along N
            f"{prefix}.scales": scales,
            f"{prefix}.g_idx": g_idx.astype(np.int32),
            "__twin__": dequantize(q, zeros, scales, g_idx),
        }

    return _write_pair(tmp, f"gptq-{bits}b-g{group}{'-act' if act_order else ''}{'-sym' if sym else ''}"
                       f"{'-v2' if v2 else ''}", qc, convert, moe)  # fmt: skip


def awq_pair(tmp: Path, group: int = 32, moe: str | None = None) -> tuple[Path, Path]:
    qc = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}

    def convert(prefix: str, w: np.ndarray, perm: np.ndarray) -> dict[str, np.ndarray]:
        g_idx = np.arange(w.shape[1]) // group
        q, zeros, scales = quantize(w, 4, group, g_idx, sym=False)
        return {
            f"{prefix}.qweight": awq_pack(q.T),  # [K, N/8]
            f"{prefix}.qzeros": awq_pack(zeros),  # [G, N/8], no offset
            f"{prefix}.scales": scales,
            "__twin__": dequantize(q, zeros, scales, g_idx),
        }

    return _write_pair(tmp, f"awq-g{group}", qc, convert, moe)


def packed_pair(
    tmp: Path, bits: int = 4, group: int = 32, sym: bool = False, act_order: bool = False, moe: str | None = None
) -> tuple[Path, Path]:
    """compressed-tensors pack-quantized; group -1 is `strategy: channel` (one scale per row)."""
    weights = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "channel" if group <= 0 else "group",
               "group_size": None if group <= 0 else group, "actorder": "group" if act_order else None}  # fmt: skip
    group_0 = {"targets": ["Linear"], "weights": weights, "input_activations": None}
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": group_0}}  # fmt: skip

    def convert(prefix: str, w: np.ndarray, perm: np.ndarray) -> dict[str, np.ndarray]:
        n, k = w.shape
        size = k if group <= 0 else group
        g_idx = np.arange(k) // size
        if act_order:
            g_idx = np.empty(k, np.int64)
            g_idx[perm] = np.arange(k) // size
        q, zeros, scales = quantize(w, bits, size, g_idx, sym)  # unsigned codes = signed + 2^(b-1)
        out = {
            f"{prefix}.weight_packed": pack_words(q, bits, axis=1),  # [N, K*b/32], along K
            f"{prefix}.weight_scale": np.ascontiguousarray(scales.T),  # [N, G]
            f"{prefix}.weight_shape": np.array([n, k], np.int64),
            "__twin__": dequantize(q, zeros, scales, g_idx),
        }
        if not sym:  # [N*b/32, G], along N, unsigned like the codes
            out[f"{prefix}.weight_zero_point"] = pack_words(np.ascontiguousarray(zeros.T), bits, axis=0)
        if act_order:
            out[f"{prefix}.weight_g_idx"] = g_idx.astype(np.int32)
        return out

    name = f"ct-{bits}b-g{group}{'-sym' if sym else ''}{'-act' if act_order else ''}"
    return _write_pair(tmp, name, qc, convert, moe)


def fp8_pair(tmp: Path, block: tuple[int, int] | None = (48, 48)) -> tuple[Path, Path]:
    """FP8 e4m3 weights with fp32 multipliers: per [bn, bk] block in `weight_scale_inv` (the last
    blocks of a 64- or 128-wide weight are partial with 48), or one `weight_scale` per tensor
    (Mistral's per-tensor form, with an unused `activation_scale`)."""
    import torch

    qc = {"quant_method": "fp8", "activation_scheme": "dynamic" if block else "static"}
    if block:
        qc["weight_block_size"] = list(block)

    def scales(w: np.ndarray) -> tuple[np.ndarray, dict[str, object]]:
        if block:
            scale, rows, cols = fp8_block_scales(w, *block)
            return scale[rows][:, cols], {"weight_scale_inv": torch.from_numpy(scale)}
        scale = np.array(np.abs(w).max() / 448.0, np.float32)
        return scale, {"weight_scale": torch.from_numpy(scale), "activation_scale": torch.tensor(0.02)}

    return write_fp8_pair(tmp, f"fp8-{'x'.join(map(str, block)) if block else 'tensor'}", qc, scales)


def fp8_block_scales(w: np.ndarray, bn: int, bk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each [bn, bk] block's amax / 448 (e4m3's largest value; partial last blocks), and each row's
    and column's block index."""
    n, k = w.shape
    rows, cols = np.arange(n) // bn, np.arange(k) // bk
    amax = np.zeros((-(-n // bn), -(-k // bk)), np.float32)
    np.maximum.at(amax, (rows[:, None], cols[None, :]), np.abs(w))
    return (amax / 448.0).astype(np.float32), rows, cols


def write_fp8_pair(
    tmp: Path, name: str, qc: dict, scales, base: Path | None = None, quantizes=None
) -> tuple[Path, Path]:
    """A tiny llama whose LINEARS weights are stored as float8 e4m3 w / full, with the tensors
    `scales(w)` returns beside each (suffix -> torch tensor; `full`: the per-element multiplier),
    and its twin holding float(w8) * full in fp32; `qc` is the quantized one's quantization_config.
    `base` replaces the tiny llama by another float checkpoint, `quantizes(key, w)` says which of
    its tensors are stored in FP8 (default: the llama's LINEARS weights)."""
    import ml_dtypes
    import torch
    from safetensors.torch import save_file as save_torch

    base = base or save_llama(tmp / f"{name}-float")
    quantizes = quantizes or (lambda key, _w: key.split(".")[-2] in LINEARS and key.endswith(".weight"))
    tensors = load_file(base / "model.safetensors")
    quantized: dict[str, torch.Tensor] = {}
    twin = dict(tensors)
    for key, w in tensors.items():
        if not quantizes(key, w):
            quantized[key] = torch.from_numpy(w)
            continue
        full, stored = scales(w)
        w8 = (w / full).astype(ml_dtypes.float8_e4m3fn)
        twin[key] = w8.astype(np.float32) * full
        quantized[key] = torch.from_numpy(w8.view(np.uint8)).view(torch.float8_e4m3fn)
        quantized.update({f"{key.removesuffix('.weight')}.{suffix}": t for suffix, t in stored.items()})

    def save_float8(tensors: dict, path: str) -> None:
        save_torch({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})

    return save_pair(tmp, name, base, quantized, twin, qc, save_float8)
