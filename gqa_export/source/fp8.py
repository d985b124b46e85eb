"""FP8 checkpoints (`quant_method: fp8`) dequantized exactly while streaming.

Each quantized Linear `P` stores `P.weight` as float8 e4m3 [N, K] and a multiplier: block-wise
`P.weight_scale_inv` [ceil(N/bn), ceil(K/bk)] for `weight_block_size` [bn, bk] (the `_inv` is
historical: it multiplies), or one per tensor (`weight_scale_inv` or Mistral's `weight_scale`,
shape [] or [1]). W = float(w8) * scale is exact in fp32 (an e4m3 value times a float32 scale
rounds once, as transformers' own dequantization does in fp32); the package then follows
`--precision` like any float checkpoint (docs/prequantized.md §3.6). Activation scales
(`activation_scale`, `input_scale`) belong to FP8 matmuls and are not used weight-only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.weights import WeightStore

SCALE_NAMES = (".weight_scale_inv", ".weight_scale")
ACTIVATION_SCALES = (".activation_scale", ".input_scale")


@dataclass
class Fp8Linear:
    """One FP8 weight read through `base` (the checkpoint's own store), dequantized by rows."""

    name: str
    base: WeightStore
    scale_name: str
    n: int
    k: int
    block: tuple[int, int] | None  # (bn, bk), None: one scale for the tensor
    fmt: str = "fp8"

    def dequantized_rows(self, a: int, b: int) -> np.ndarray:
        w = self.base.read(self.name, rows=(a, b)).astype(np.float32)
        scale = self.base.read(self.scale_name).astype(np.float32)
        if self.block is None:
            return w * scale.reshape(-1)[0]
        bn, bk = self.block
        rows = scale[np.arange(a, b) // bn]  # [b - a, ceil(K / bk)]
        return w * rows[:, np.arange(self.k) // bk]


def fp8_linear(base: WeightStore, name: str, block: list[int] | None) -> Fp8Linear:
    prefix = name.removesuffix(".weight")
    n, k = base.info(name).shape
    scale_name = next((prefix + s for s in SCALE_NAMES if prefix + s in base), None)
    if scale_name is None:
        raise InputError(f"{name} is float8 but has no weight_scale_inv / weight_scale; the checkpoint is broken")
    shape = tuple(base.info(scale_name).shape)
    if int(np.prod(shape)) == 1:
        return Fp8Linear(name, base, scale_name, n, k, None)
    if block is None or len(block) != 2:
        raise InputError(f"{scale_name} has shape {list(shape)} but config.json gives no weight_block_size [bn, bk]")
    bn, bk = (int(v) for v in block)
    if shape != (-(-n // bn), -(-k // bk)):
        raise InputError(
            f"{scale_name} is {list(shape)}, not [{-(-n // bn)}, {-(-k // bk)}] for {name} [{n}, {k}] "
            f"in blocks of {bn}x{bk}; the checkpoint does not match its config.json"
        )
    return Fp8Linear(name, base, scale_name, n, k, (bn, bk))
