"""bitsandbytes checkpoints (NF4 / FP4, LLM.int8) dequantized exactly while streaming, on request.

Only with `build --dequantize`: their exact onnxruntime forms (MatMulBnb4, float zero points) are
far slower on CPU than MatMulNBits, and NF4's levels are not an affine grid, so the package
re-quantizes the dequantized weights with `--precision` (or stays float). Without the flag they are
refused in one line that names the flag (source/prequantized.py). On-disk layouts and the exact
dequantization: docs/prequantized.md §3.9.
- 4-bit: `P.weight` uint8 [ceil(N·K/2), 1], W [N, K] flattened row-major, two codes a byte, the
  first in the high nibble; `P.weight.absmax` one scale per `blocksize` elements (fp32, or with
  double quantization uint8 codes into `P.weight.nested_quant_map` times `P.weight.nested_absmax`
  per `nested_blocksize` codes, plus `nested_offset`); `P.weight.quant_map` the 16 levels;
  `P.weight.quant_state.bitsandbytes__nf4|fp4` the JSON of the rest (shape, blocksize, dtype, ...).
  W = quant_map[code] · absmax in fp32, rounded to the state's `dtype` as bitsandbytes' own
  dequantization returns it.
- 8-bit (LLM.int8): `P.weight` int8 [N, K], `P.SCB` fp32 [N]: W = (q · SCB[n]) · (1/127 as float32).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.weights import WeightStore

STATE = ".weight.quant_state.bitsandbytes__"
# the tensors of a quantized module the store hides (its `.weight` is shown as the dequantized float)
HIDDEN = (".weight.absmax", ".weight.quant_map", ".weight.nested_absmax", ".weight.nested_quant_map",
          f"{STATE}nf4", f"{STATE}fp4", ".SCB", ".weight_format")  # fmt: skip
INT8_STEP = np.float32(7.874015718698502e-3)  # bitsandbytes' 1/127 (int8_vectorwise_dequant)
ROUNDED = {"float16": np.float16, "bfloat16": "bfloat16", "float32": np.float32}


def is_bitsandbytes(qc: dict[str, Any]) -> bool:
    method = qc.get("quant_method")
    return method == "bitsandbytes" or (method is None and bool(qc.get("load_in_4bit") or qc.get("load_in_8bit")))


def why_not_bitsandbytes(qc: dict[str, Any]) -> str | None:
    """None when `--dequantize` reads this bitsandbytes config, else what it does not read."""
    storage = str(qc.get("bnb_4bit_quant_storage") or "uint8").removeprefix("torch.")
    if qc.get("load_in_4bit") and storage != "uint8":
        return f"bitsandbytes 4-bit stored as {storage} (uint8 storage is dequantized)"
    return None


def nibbles(raw: np.ndarray) -> np.ndarray:
    """uint8 bytes -> their 4-bit codes in element order: the first element is the high nibble."""
    return np.stack([raw >> 4, raw & 0xF], axis=1).reshape(-1)


def prefixes(names: list[str]) -> list[str]:
    """Every module bitsandbytes quantized: a 4-bit quant_state, or LLM.int8's SCB."""
    found = [n.split(STATE)[0] for n in names if STATE in n]
    return found + [n.removesuffix(".SCB") for n in names if n.endswith(".SCB")]


@dataclass
class BnbLinear:
    """One bitsandbytes weight read through `base` (the checkpoint's own store), dequantized by rows."""

    name: str
    base: WeightStore
    n: int
    k: int
    state: dict[str, Any]  # 4-bit: the quant_state JSON; 8-bit: {}
    fmt: str = "bitsandbytes"

    def dequantized_rows(self, a: int, b: int) -> np.ndarray:
        if not self.state:  # LLM.int8
            q = self.base.read(self.name, rows=(a, b)).astype(np.float32)
            scb = self.base.read(self.name.removesuffix(".weight") + ".SCB").astype(np.float32).reshape(-1)
            return (q * scb[a:b, None]) * INT8_STEP
        e0, e1 = a * self.k, b * self.k  # elements of the flattened W
        raw = self.base.read_slices(self.name, slice(e0 // 2, (e1 + 1) // 2)).reshape(-1)
        codes = nibbles(raw)[e0 % 2 : e0 % 2 + e1 - e0]
        levels = self.base.read(f"{self.name}.quant_map").astype(np.float32)
        bs = int(self.state["blocksize"])
        first, last = e0 // bs, (e1 - 1) // bs + 1
        absmax = self._absmax(first, last)
        w = levels[codes] * absmax[np.arange(e0, e1) // bs - first]
        rounded = ROUNDED.get(str(self.state.get("dtype", "float32")).removeprefix("torch."), np.float32)
        if rounded == "bfloat16":
            import ml_dtypes

            rounded = ml_dtypes.bfloat16
        return w.astype(rounded).astype(np.float32).reshape(b - a, self.k)

    def _absmax(self, first: int, last: int) -> np.ndarray:
        """fp32 scales of blocks [first, last): stored, or double-quantized codes dequantized."""
        stored = self.base.read_slices(f"{self.name}.absmax", slice(first, last)).reshape(-1)
        if "nested_blocksize" not in self.state:
            return stored.astype(np.float32)
        nbs = int(self.state["nested_blocksize"])
        table = self.base.read(f"{self.name}.nested_quant_map").astype(np.float32)
        outer = self.base.read(f"{self.name}.nested_absmax").astype(np.float32).reshape(-1)
        scaled = table[stored.astype(np.int64)] * outer[np.arange(first, last) // nbs]
        return scaled + np.float32(self.state["nested_offset"])


def bnb_linear(base: WeightStore, prefix: str) -> BnbLinear:
    name = f"{prefix}.weight"
    kinds = [k for k in ("nf4", "fp4") if f"{prefix}{STATE}{k}" in base]
    if not kinds:  # LLM.int8
        if base.info(name).dtype != "I8" or len(base.info(name).shape) != 2:
            raise InputError(f"{name} is not an int8 [N, K] matrix beside its SCB; not a bitsandbytes 8-bit checkpoint")
        layout = f"{prefix}.weight_format"  # bitsandbytes' 0 "row"; 1-3 GPU tile layouts (col32, turing, ampere)
        if layout in base and int(np.asarray(base.read(layout)).reshape(-1)[0]) != 0:
            found = int(np.asarray(base.read(layout)).reshape(-1)[0])
            raise InputError(f"{layout} is {found}: an 8-bit weight saved in a GPU tile layout, not row-major, is not "
                             "read; re-save the checkpoint with a current bitsandbytes (row layout) or export the "
                             "float checkpoint")  # fmt: skip
        n, k = base.info(name).shape
        return BnbLinear(name, base, n, k, {})
    state = json.loads(bytes(base.read(f"{prefix}{STATE}{kinds[0]}").reshape(-1).astype(np.uint8)).decode("utf-8"))
    shape = [int(v) for v in state.get("shape", [])]
    if len(shape) != 2 or base.info(name).dtype != "U8":
        raise InputError(f"{name}: a bitsandbytes 4-bit weight of shape {shape} stored as {base.info(name).dtype} "
                         "(a uint8 2-D linear is dequantized); this checkpoint is not read")  # fmt: skip
    for suffix in (".absmax", ".quant_map") + (
        (".nested_absmax", ".nested_quant_map") if "nested_blocksize" in state else ()
    ):
        base.info(f"{name}{suffix}")  # present, else one line naming it
    return BnbLinear(name, base, shape[0], shape[1], state)
