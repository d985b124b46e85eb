"""BitNet b1.58 checkpoints (`quant_method: bitnet`): packed ternary weights as 2-bit MatMulNBits codes.

transformers' bitnet integration stores each quantized Linear `P` W [N, K] as (docs/prequantized.md
§3.10):
- `P.weight` uint8 [N/4, K]: the ternary codes t in {-1, 0, 1} stored as t + 1 in {0, 1, 2}, four
  output rows a byte: output row r = j·(N/4) + p sits in stored row p at bits 2j..2j+1;
- `P.weight_scale` [1], one per tensor. `linear_class: bitlinear` (the default) divides the output by
  it, so W = t / weight_scale; `autobitlinear` with `quantization_mode: offline` multiplies, W = t ·
  weight_scale.
Both quantize the Linear's input first, per token, to int8 absmax: x -> clamp(round(x·s), -128, 127)
/ s with s = 127 / max(max|x|, 1e-5); that is part of what the checkpoint computes, so the import
keeps it (quant/imported.py). The codes are MatMulNBits' 2-bit codes as they are, with a zero point
of 1 and the per-tensor scale as every block's scale: nothing is re-rounded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.native import NativeLinear
from gqa_export.source.weights import WeightStore

BITS = 2
ROWS_PER_BYTE = 4
ZERO_POINT = 1  # the stored code of ternary 0
ACTIVATION_BITS = 8  # transformers' BitLinear / AutoBitLinear quantize their input to int8 per token
BLOCK_SIZES = (256, 128, 64, 32, 16)  # MatMulNBits' CPU block sizes (onnxruntime 1.31.1), largest first


def why_not_bitnet(qc: dict[str, Any]) -> str | None:
    """None for the offline packed layouts (bitlinear, autobitlinear offline) without an input RMSNorm."""
    linear_class = str(qc.get("linear_class") or "bitlinear")
    mode = str(qc.get("quantization_mode") or "offline")
    if linear_class not in ("bitlinear", "autobitlinear"):
        return f"BitNet linear_class {linear_class!r}"
    if mode != "offline":
        return f"BitNet quantization_mode {mode!r} (float weights ternarized at every forward; offline is imported)"
    if qc.get("use_rms_norm"):
        return "BitNet use_rms_norm (an RMSNorm inside every quantized Linear)"
    return None


class BitnetLinear(NativeLinear):
    """A packed ternary Linear (see module doc): codes unpacked from the stored row a byte holds."""

    @property
    def repeat(self) -> int:  # one group of K: its scale on every block, a padded last one too
        return self.k_blocks

    def codes(self, a: int, b: int) -> np.ndarray:
        stored, parts, r = self.n // ROWS_PER_BYTE, [], a
        while r < b:  # output rows j·stored + p, one shift j at a time
            j, p = divmod(r, stored)
            end = min(b, (j + 1) * stored)
            packed = self.store.read(f"{self.prefix}.weight", rows=(p, p + end - r))
            parts.append((packed >> np.uint8(BITS * j)) & np.uint8((1 << BITS) - 1))
            r = end
        return np.ascontiguousarray(np.concatenate(parts))


def bitnet_linear(base: WeightStore, prefix: str, qc: dict[str, Any]) -> BitnetLinear:
    """One packed linear read through `base` (the checkpoint's own store: `P.weight` is uint8)."""
    stored, k = base.info(f"{prefix}.weight").shape
    n = stored * ROWS_PER_BYTE
    if int(np.prod(base.info(f"{prefix}.weight_scale").shape)) != 1:
        raise InputError(
            f"{prefix}.weight_scale holds {list(base.info(f'{prefix}.weight_scale').shape)} values, not the one "
            "per-tensor scale BitNet stores; the checkpoint does not match its config.json"
        )
    # the largest block dividing K, else 16 with a padded last block (an odd hidden size: K = 40, 72)
    block = next((bs for bs in BLOCK_SIZES if k % bs == 0), BLOCK_SIZES[-1])
    multiplies = str(qc.get("linear_class") or "bitlinear") == "autobitlinear"

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        stored_scale = np.float32(base.read(f"{prefix}.weight_scale").astype(np.float32).reshape(-1)[0])
        scale = stored_scale if multiplies else np.float32(1.0) / stored_scale
        return np.full((n, 1), scale, np.float32), np.full((n, 1), ZERO_POINT, np.uint8)

    return BitnetLinear(
        f"{prefix}.weight", f"bitnet {'autobitlinear' if multiplies else 'bitlinear'}", base, prefix, n, k, BITS, k,
        block, params, None, activation_bits=ACTIVATION_BITS,
    )  # fmt: skip
