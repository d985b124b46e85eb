"""FP8 checkpoints (`quant_method: fp8`) dequantized exactly while streaming.

Each quantized Linear `P` stores `P.weight` as float8 e4m3 [N, K] and a multiplier: block-wise
`P.weight_scale_inv` [ceil(N/bn), ceil(K/bk)] for `weight_block_size` [bn, bk] (the `_inv` is
historical: it multiplies), or one per tensor (`weight_scale_inv` or Mistral's `weight_scale`,
shape [] or [1]). W = float(w8) * scale is exact in fp32 (an e4m3 value times a float32 scale
rounds once, as transformers' own dequantization does in fp32); the package then follows
`--precision` like any float checkpoint (docs/prequantized.md §3.6). compressed-tensors'
`float-quantized` format stores the same thing as `P.weight` + `P.weight_scale`, its strategy
(tensor, channel, group, block) mapped onto the same blocks (docs/prequantized.md §3.8). Activation scales
(`activation_scale`, `input_scale`) belong to FP8 matmuls and are not used weight-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    if scale_name is None and f"{prefix}.scale" in base:  # DeepSeek-V4's spelling, float8 e8m0
        raise InputError(
            f"{name} is float8 with its block scales as {prefix}.scale (DeepSeek-V4's release, float8 e8m0), which "
            "gqa-export does not read yet (FP8 scales are read as weight_scale_inv / weight_scale); export the "
            "model's float (fp16/bf16/fp32) checkpoint instead"
        )
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


# DeepSeek-V4's release (`expert_dtype: fp4`, source/prequantized.declared_quantization): what no reader here takes
FP4_EXPERTS = (
    "FP8 with expert_dtype 'fp4': DeepSeek-V4's release, its routed experts FP4 (e2m1 pairs packed in int8, a float8 "
    "e8m0 scale per 32 inputs) and its block scales `<linear>.scale` in float8 e8m0, neither read here (FP8 scales "
    "are read as weight_scale_inv / weight_scale)"
)


def why_not_fp8(qc: dict[str, Any]) -> str | None:
    """`quant_method: fp8`: block scales for a [rows, cols] `weight_block_size`, or one per tensor; FP8 experts."""
    if qc.get("expert_dtype", "fp8") != "fp8":
        return FP4_EXPERTS
    block = qc.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or len(block) != 2):
        return f"FP8 weight_block_size {block!r} (a [rows, cols] pair or none is imported)"
    return None


def why_not_compressed_float(qc: dict[str, Any]) -> str | None:
    """compressed-tensors whose config groups are all float-quantized (source/formats.py tells it apart)."""
    return why_not_float_quantized(qc["config_groups"])


def why_not_float_quantized(groups: dict[str, Any]) -> str | None:
    """compressed-tensors float-quantized: one config group of symmetric FP8 weights, any strategy but
    tensor_group; FP8 (float) activations allowed and not reproduced, as `quant_method: fp8`'s."""
    if len(groups) != 1:
        return "compressed-tensors float-quantized with several config_groups"
    group = next(iter(groups.values())) or {}
    weights = group.get("weights") or {}
    if weights.get("type") != "float" or weights.get("num_bits") != 8:
        return f"compressed-tensors float-quantized {weights.get('type')} {weights.get('num_bits')}-bit weights"
    strategy = weights.get("strategy")
    if strategy not in ("tensor", "channel", "group", "block") or weights.get("symmetric") is False:
        return f"compressed-tensors float-quantized strategy {strategy!r} (symmetric tensor/channel/group/block)"
    if strategy == "block" and len(weights.get("block_structure") or []) != 2:
        return f"compressed-tensors float-quantized block_structure {weights.get('block_structure')!r}"
    activations = group.get("input_activations")
    if group.get("output_activations") or (activations and activations.get("type") != "float"):
        return "compressed-tensors float-quantized weights with integer or output activation quantization"
    return None


def float_quantized_block(groups: dict[str, Any], n: int, k: int) -> list[int] | None:
    """The [rows, cols] each weight_scale value covers (None: one for the tensor), by strategy."""
    weights = next(iter(groups.values()))["weights"]
    strategy = weights["strategy"]
    if strategy == "channel":
        return [1, k]
    if strategy == "group":
        return [1, int(weights["group_size"])]
    if strategy == "block":
        return [int(v) for v in weights["block_structure"]]
    return None


def read_compressed_float(base: WeightStore, prefix: str, qc: dict[str, Any]) -> Fp8Linear:
    """One compressed-tensors float-quantized linear: FP8's read, its blocks from the strategy."""
    block = float_quantized_block(qc["config_groups"], *base.info(f"{prefix}.weight").shape)
    zero = f"{prefix}.weight_zero_point"
    if zero in base and np.any(base.read(zero)):  # FP8 is symmetric: a stored zero point must be 0
        raise InputError(f"{zero} is not zero; an asymmetric FP8 checkpoint is not imported")
    return fp8_linear(base, f"{prefix}.weight", block)
