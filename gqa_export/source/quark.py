"""AMD Quark int4 checkpoints (`quant_method: quark`, weight-only, per group) as MatMulNBits integers.

Quark's real-quantized export stores each quantized Linear `P` as (docs/prequantized.md §3.7):
- `P.weight` int32 [K, ceil(N/8)]: the codes transposed to [K, N] and packed along N, eight
  4-bit fields a word, nibble i of word c holding column 8c + order[i], with order
  [0,2,4,6,1,3,5,7] for `export.pack_method: reorder` (AWQ's) and the identity for `order`;
- `P.weight_scale` [K/group, N] (the transposed per-group scales);
- `P.weight_zero_point` int32 [K/group, ceil(N/8)], packed like the codes.
`dtype: int4` stores two's-complement nibbles (codes and zero points in [-8, 7]), `uint4` plain
ones in [0, 15]; both mean W[n, k] = (q - z) * s. MatMulNBits takes unsigned codes, so int4 codes
and zero points move by +8 (the difference, hence every weight, is unchanged) and a symmetric int4
checkpoint (every zero point 0) needs no zero-point input: 0 + 8 is the op's default.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.native import NativeLinear, _or_default, matmul_block_size
from gqa_export.source.weights import WeightStore

# nibble i of a word holds column 8c + PACK_ORDER[i] with pack_method "reorder" (docs/prequantized.md §3.7)
PACK_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
# the signed -> unsigned move of int4 codes and zero points (uint4 stores them unsigned already)
SIGNED_OFFSET = 8
IMPORTED_DTYPES = ("int4", "uint4")
ACTIVATIONS = ("input_tensors", "output_tensors", "bias")


def why_not_quark(qc: dict[str, Any]) -> str | None:
    """None when the Quark config is weight-only int4/uint4 per group in the real-quantized layout."""
    export = qc.get("export")
    if not isinstance(export, dict):
        return "Quark export without an `export` block (the layout of quark < 1.0)"
    if str(export.get("weight_format") or "real_quantized") != "real_quantized":
        return f"Quark weight_format {export.get('weight_format')!r} (only real_quantized is imported)"
    if str(export.get("pack_method") or "reorder") not in ("reorder", "order"):
        return f"Quark pack_method {export.get('pack_method')!r}"
    if qc.get("layer_type_quant_config"):
        return "Quark with a layer_type_quant_config"
    if qc.get("kv_cache_quant_config") or export.get("kv_cache_group"):
        return "Quark with a quantized KV cache"
    configs = [("global_quant_config", qc.get("global_quant_config"))]
    configs += list((qc.get("layer_quant_config") or {}).items())
    for where, config in configs:
        why = _why_not_layer(config, where)
        if why:
            return why
    return None


def _why_not_layer(config: Any, where: str) -> str | None:
    if not isinstance(config, dict):
        return f"Quark {where} {config!r}"
    for role in ACTIVATIONS:
        spec = config.get(role)
        if spec:
            dtype = spec.get("dtype") if isinstance(spec, dict) else "several"
            return f"Quark with quantized {role} ({dtype}; only weight-only int4/uint4 is imported)"
    weight = config.get("weight")
    if not isinstance(weight, dict):
        return f"Quark {where} weight {weight!r} (several quantizers in sequence, or none)"
    dtype = weight.get("dtype")
    if dtype not in IMPORTED_DTYPES:
        return f"Quark {dtype} weights (only int4/uint4 per-group weight-only is imported)"
    if weight.get("qscheme") != "per_group" or weight.get("ch_axis", -1) not in (1, -1):
        return f"Quark {dtype} qscheme {weight.get('qscheme')!r} (only per_group along the input is imported)"
    if weight.get("is_dynamic") or weight.get("scale_format") not in (None, "float"):
        return f"Quark {dtype} with dynamic or {weight.get('scale_format')} scales"
    if not isinstance(weight.get("group_size"), int) or weight["group_size"] <= 0:
        return f"Quark group_size {weight.get('group_size')!r}"
    return None


def layer_weight_config(qc: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The weight quantizer of one module: the first layer_quant_config pattern it matches, else the global one."""
    for pattern, config in (qc.get("layer_quant_config") or {}).items():
        if fnmatch.fnmatch(prefix, pattern):
            return config["weight"]
    return qc["global_quant_config"]["weight"]


def quark_unpack(words: np.ndarray, reorder: bool) -> np.ndarray:
    """int32 [R, W] -> uint8 [R, 8W] nibbles in column order, as stored (two's complement for int4)."""
    nibbles = ((words.astype(np.int64)[..., None] >> (4 * np.arange(8))) & 0xF).astype(np.uint8)
    out = np.empty_like(nibbles)
    out[..., PACK_ORDER if reorder else np.arange(8)] = nibbles
    return out.reshape(words.shape[0], -1)


def unsigned(nibbles: np.ndarray, signed: bool) -> np.ndarray:
    """MatMulNBits' unsigned 4-bit value: int4 nibble v means v - 16 when v >= 8, then + SIGNED_OFFSET."""
    if not signed:
        return nibbles
    values = nibbles.astype(np.int16) - 16 * (nibbles >= 8) + SIGNED_OFFSET
    return values.astype(np.uint8)


def zero_points(words: np.ndarray, reorder: bool, signed: bool, n: int) -> np.ndarray:
    """weight_zero_point int32 [G, ceil(N/8)] -> uint8 [N, G], on the codes' unsigned scale."""
    return np.ascontiguousarray(unsigned(quark_unpack(words, reorder), signed)[:, :n].T)


class QuarkLinear(NativeLinear):
    """Quark int4/uint4 per group: codes [K, N/8] packed along N (see module doc)."""

    reorder: bool = True
    signed: bool = False

    def codes(self, a: int, b: int) -> np.ndarray:
        c0, c1 = a // 8, (b + 7) // 8
        words = self.store.read(f"{self.prefix}.weight", cols=(c0, c1))  # [K, c1 - c0]
        q = unsigned(quark_unpack(words, self.reorder), self.signed)
        return np.ascontiguousarray(q[:, a - 8 * c0 : b - 8 * c0].T)


def quark_linear(base: WeightStore, prefix: str, qc: dict[str, Any]) -> QuarkLinear:
    """One Quark linear read through `base` (the checkpoint's own store: `P.weight` is the int32 codes)."""
    weight = layer_weight_config(qc, prefix)
    signed = weight["dtype"] == "int4"
    reorder = str(qc["export"].get("pack_method") or "reorder") == "reorder"
    for suffix in (".weight_scale", ".weight_zero_point"):
        if prefix + suffix not in base:
            raise InputError(
                f"{prefix}.weight holds Quark int32 codes but {prefix}{suffix} is missing; broken checkpoint"
            )
    k = base.info(f"{prefix}.weight").shape[0]
    groups, n = base.info(f"{prefix}.weight_scale").shape
    group = int(weight["group_size"])
    if groups * group != k or base.info(f"{prefix}.weight").shape[1] != -(-n // 8):
        raise InputError(
            f"{prefix}: weight {list(base.info(f'{prefix}.weight').shape)} and weight_scale [{groups}, {n}] are not "
            f"[K, ceil(N/8)] and [K/{group}, N]; the checkpoint does not match its config.json"
        )

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        scales = np.ascontiguousarray(base.read(f"{prefix}.weight_scale").astype(np.float32).T)  # [N, G]
        zeros = zero_points(base.read(f"{prefix}.weight_zero_point"), reorder, signed, n)
        return scales, _or_default(zeros, 4)

    linear = QuarkLinear(
        f"{prefix}.weight", f"quark {weight['dtype']}", base, prefix, n, k, 4, group,
        matmul_block_size(group, k), params, None,
    )  # fmt: skip
    linear.reorder, linear.signed = reorder, signed
    return linear
