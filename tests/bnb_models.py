"""Tiny bitsandbytes checkpoints (NF4 / FP4 with or without double quantization, LLM.int8) written
with numpy in bitsandbytes' serialized layout, and an independent numpy dequantizer.

bitsandbytes itself is a GPU package and is not installed: the writer follows the format as
docs/prequantized.md §3.9 describes it (QuantState.as_dict(packed=True) keys, high nibble first,
absmax per block, double quantization of absmax minus its mean in blocks of 256 against a 256-entry
signed table), and `dequantize` reads it back separately from gqa_export/source/bnb.py. The twin
holds what `dequantize` gives: the weights the checkpoint means.

    bnb_pair(tmp, kind="nf4", double=True, blocksize=64, dtype="bfloat16") -> (quantized, twin)
    bnb_pair(tmp, kind="int8") -> (quantized, twin)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from prequant_models import LINEARS, save_pair
from safetensors.numpy import load_file
from tiny_models import save_llama

NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023,
       1.0]  # fmt: skip
FP4 = [v / 12.0 for v in (0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0)]
# a signed, denser-near-zero 256-entry table (bitsandbytes' dynamic map has the same role)
NESTED_MAP = np.sort(np.sign(np.linspace(-1, 1, 256)) * np.linspace(-1, 1, 256) ** 2).astype(np.float32)
STEP = np.float32(7.874015718698502e-3)


def _nearest(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return np.abs(x[:, None] - table[None, :]).argmin(1).astype(np.uint8)


def quantize_4bit(
    w: np.ndarray, kind: str, double: bool, blocksize: int, dtype: str, nested: int = 256
) -> dict[str, np.ndarray]:
    """W [N, K] -> the tensors of one bitsandbytes 4-bit Linear (names relative to `P.weight`);
    `nested`: the double quantization's block of absmax values (bitsandbytes' 256; smaller ones
    make a tiny weight span several, as a real one does)."""
    levels = np.array(NF4 if kind == "nf4" else FP4, np.float32)
    flat = w.reshape(-1).astype(np.float32)
    absmax = np.abs(flat.reshape(-1, blocksize)).max(1).astype(np.float32)
    codes = _nearest(flat / np.repeat(absmax, blocksize), levels)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8).reshape(-1, 1)
    state: dict = {"quant_type": kind, "blocksize": blocksize, "dtype": dtype, "shape": list(w.shape)}
    out = {"": packed, ".quant_map": levels}
    if double:
        offset = np.float32(absmax.mean())
        centred = absmax - offset
        blocks = -(-centred.size // nested)
        padded = np.zeros(blocks * nested, np.float32)
        padded[: centred.size] = centred
        outer = np.abs(padded.reshape(blocks, nested)).max(1).astype(np.float32)
        out[".absmax"] = _nearest(centred / np.repeat(outer, nested)[: centred.size], NESTED_MAP)
        out[".nested_absmax"], out[".nested_quant_map"] = outer, NESTED_MAP
        state.update(nested_blocksize=nested, nested_dtype="float32", nested_offset=float(offset))
    else:
        out[".absmax"] = absmax
    out[f".quant_state.bitsandbytes__{kind}"] = np.frombuffer(json.dumps(state).encode(), np.uint8).copy()
    return out


def dequantize(tensors: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Independent reader: one module's bitsandbytes tensors -> float32 W [N, K]."""
    name = f"{prefix}.weight"
    if f"{prefix}.SCB" in tensors:
        return (tensors[name].astype(np.float32) * tensors[f"{prefix}.SCB"][:, None]) * STEP
    key = next(k for k in tensors if k.startswith(f"{name}.quant_state.bitsandbytes__"))
    state = json.loads(tensors[key].tobytes().decode())
    packed = tensors[name].reshape(-1)
    codes = np.empty(packed.size * 2, np.int64)
    codes[0::2], codes[1::2] = packed >> 4, packed & 15
    absmax = tensors[f"{name}.absmax"]
    if "nested_offset" in state:
        nested = tensors[f"{name}.nested_quant_map"][absmax.astype(np.int64)]
        every = int(state["nested_blocksize"])
        absmax = nested * np.repeat(tensors[f"{name}.nested_absmax"], every)[: absmax.size] + np.float32(
            state["nested_offset"]
        )
    n, k = state["shape"]
    w = tensors[f"{name}.quant_map"][codes[: n * k]] * np.repeat(absmax, state["blocksize"])[: n * k]
    if state["dtype"] == "bfloat16":
        import ml_dtypes

        w = w.astype(ml_dtypes.bfloat16)
    return w.astype(np.float32).reshape(n, k)


def bnb_pair(
    tmp: Path, kind: str = "nf4", double: bool = True, blocksize: int = 64, dtype: str = "bfloat16", nested: int = 256
) -> tuple[Path, Path]:
    name = f"bnb-{kind}{'-dq' if double else ''}-b{blocksize}" + (f"-n{nested}" if nested != 256 else "")
    base = save_llama(tmp / f"{name}-float")
    tensors = load_file(base / "model.safetensors")
    quantized, twin = {}, dict(tensors)
    for key, w in tensors.items():
        if key.split(".")[-2] not in LINEARS or not key.endswith(".weight"):
            quantized[key] = w
            continue
        prefix = key.removesuffix(".weight")
        if kind == "int8":  # LLM.int8: one absmax per output row
            scb = np.abs(w).max(1).astype(np.float32)
            codes = np.clip(np.round(w / scb[:, None] * 127), -127, 127).astype(np.int8)
            # transformers saves the row layout's id beside each 8-bit weight (0 "row")
            mine = {key: codes, f"{prefix}.SCB": scb, f"{prefix}.weight_format": np.array(0, np.uint8)}
        else:
            mine = {key + s: v for s, v in quantize_4bit(w, kind, double, blocksize, dtype, nested).items()}
        quantized.update(mine)
        twin[key] = dequantize(mine, prefix)
    if kind == "int8":
        qc = {"quant_method": "bitsandbytes", "load_in_8bit": True, "llm_int8_threshold": 6.0}
    else:
        qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": kind,
              "bnb_4bit_use_double_quant": double, "bnb_4bit_compute_dtype": dtype,
              "bnb_4bit_quant_storage": "uint8", "llm_int8_skip_modules": None}  # fmt: skip
    return save_pair(tmp, name, base, quantized, twin, qc)
