"""A pre-quantized checkpoint seen as the float model it means, with its integers kept aside.

`ImportedStore` wraps the checkpoint's `WeightStore`: each quantized linear `P` (GPTQ/AWQ's
`P.qweight`, `P.qzeros`, `P.scales`, `P.g_idx`; compressed-tensors' `P.weight_packed`, ...; FP8's
float8 `P.weight` with its scale; Quark's int32 `P.weight` with `P.weight_scale` /
`P.weight_zero_point`) appears as a float `P.weight` [N, K], so every family's graph is built
exactly as for a float checkpoint. Reading that weight dequantizes it (rows on demand); for the
integer formats the quantize stage instead asks `native(name)` and moves the integers into
MatMulNBits unchanged (quant/imported.py).
Which configs are imported: docs/prequantized.md §1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source import bnb
from gqa_export.source.fp8 import (
    ACTIVATION_SCALES,
    SCALE_NAMES,
    Fp8Linear,
    float_quantized_block,
    fp8_linear,
    why_not_float_quantized,
)
from gqa_export.source.native import NativeLinear, awq_linear, gptq_linear, packed_linear
from gqa_export.source.quark import quark_linear, why_not_quark
from gqa_export.source.weights import TensorInfo, WeightStore

NAMES = {"gptq": "GPTQ", "awq": "AWQ", "compressed-tensors": "compressed-tensors", "fp8": "FP8", "quark": "Quark",
         "bitsandbytes": "bitsandbytes"}  # fmt: skip
# per method: tensors every quantized module must have besides its marker
REQUIRED = {"gptq": (".qzeros", ".scales"), "awq": (".qzeros", ".scales"),
            "compressed-tensors": (".weight_scale", ".weight_shape")}  # fmt: skip
# per method: the tensor that marks a quantized module, and every tensor of it the store hides
MARKER = {"gptq": ".qweight", "awq": ".qweight", "compressed-tensors": ".weight_packed"}
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")
HIDDEN = {
    "gptq": (".qweight", ".qzeros", ".scales", ".g_idx"),
    "awq": (".qweight", ".qzeros", ".scales"),
    "compressed-tensors": (".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx"),
    # its `.weight` is shown as the dequantized float (compressed-tensors float-quantized may store zero points)
    "fp8": (*SCALE_NAMES, *ACTIVATION_SCALES, ".weight_zero_point"),
    "quark": (".weight_scale", ".weight_zero_point"),  # its int32 `.weight` is shown as float too
    "bitsandbytes": bnb.HIDDEN,  # with --dequantize only (docs/prequantized.md §3.9)
}
# methods whose quantized module keeps the name `P.weight` (FP8 codes, Quark's int32 words, bitsandbytes)
IN_PLACE = {"fp8": FP8_DTYPES, "quark": ("I32",), "bitsandbytes": ()}


def why_not_imported(qc: dict[str, Any]) -> str | None:
    """None when this tool imports the config's format as it is, else what it does not import."""
    method = str(qc.get("quant_method", "")).lower()
    if method == "gptq":
        bits = qc.get("bits", 4)
        if bits not in (2, 4, 8):
            return f"{bits}-bit GPTQ (2, 4 and 8 bits are imported)"
        if qc.get("dynamic"):
            return "GPTQ with per-module `dynamic` overrides"
        if str(qc.get("checkpoint_format") or qc.get("format") or "gptq") not in ("gptq", "gptq_v2"):
            return f"GPTQ checkpoint_format {qc.get('checkpoint_format') or qc.get('format')!r}"
        return None
    if method == "awq":
        version = str(qc.get("version") or qc.get("format") or "gemm").lower()
        if version != "gemm" or qc.get("bits", 4) != 4:
            return f"AWQ {version} {qc.get('bits', 4)}-bit (only 4-bit GEMM is imported)"
        if qc.get("zero_point") is False:
            return "AWQ without zero points"
        return None
    if method == "compressed-tensors":
        return _why_not_packed(qc)
    if method == "quark":
        return why_not_quark(qc)
    if method == "fp8":
        block = qc.get("weight_block_size")
        if block is not None and (not isinstance(block, list) or len(block) != 2):
            return f"FP8 weight_block_size {block!r} (a [rows, cols] pair or none is imported)"
        return None
    return "this format"


def _why_not_packed(qc: dict[str, Any]) -> str | None:
    """compressed-tensors: only `pack-quantized` int4/int8 weights, group or channel, weight-only."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        return "compressed-tensors without config_groups"
    if {str((g or {}).get("format") or qc.get("format") or "") for g in groups.values()} == {"float-quantized"}:
        return why_not_float_quantized(groups)
    bits = set()
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        fmt = str((group or {}).get("format") or qc.get("format") or "")
        if fmt != "pack-quantized":
            return f"compressed-tensors format {fmt!r} (pack-quantized int4/int8 and float-quantized FP8 are imported)"
        if weights.get("type", "int") != "int" or weights.get("num_bits") not in (4, 8):
            return f"compressed-tensors {weights.get('type')} {weights.get('num_bits')}-bit weights"
        if weights.get("strategy") not in ("group", "channel"):
            return f"compressed-tensors strategy {weights.get('strategy')!r} (group and channel are imported)"
        if weights.get("actorder") not in (None, "weight", "group"):
            return f"compressed-tensors actorder {weights.get('actorder')!r}"
        if (group or {}).get("input_activations"):
            return "compressed-tensors with quantized activations (only weight-only W4A16/W8A16 is imported)"
        bits.add(int(weights["num_bits"]))
    if len(bits) > 1:
        return "compressed-tensors with several weight bit widths"
    return None


def is_imported(qc: dict[str, Any]) -> bool:
    return why_not_imported(qc) is None


class ImportedStore(WeightStore):
    """The checkpoint's tensors, quantized linears shown as float `P.weight` (see module doc)."""

    def __init__(self, base: WeightStore, qc: dict[str, Any]) -> None:
        super().__init__(dict(base._tensors))
        self.quantization = qc
        self.method = str(qc["quant_method"]).lower()
        # how the tensors are laid out: compressed-tensors float-quantized is FP8's `P.weight` + scale
        self.layout = "fp8" if self.method == "compressed-tensors" and _float_quantized(qc) else self.method
        self._native: dict[str, NativeLinear] = {}
        self._virtual: dict[str, NativeLinear | Fp8Linear | bnb.BnbLinear] = {}
        self._hidden: set[str] = set()
        if self.layout == "bitsandbytes":
            prefixes = bnb.prefixes(base.names())
        elif self.layout in IN_PLACE:
            prefixes = [n.removesuffix(".weight") for n in base.names()
                        if n.endswith(".weight") and base.info(n).dtype in IN_PLACE[self.layout]]  # fmt: skip
        else:
            prefixes = [n.removesuffix(MARKER[self.layout]) for n in base.names() if n.endswith(MARKER[self.layout])]
        if not prefixes:
            raise InputError(
                f"this is a pre-quantized {NAMES[self.method]} checkpoint by its config.json, but it stores no "
                "quantized weights; the checkpoint is inconsistent: export the model's float checkpoint instead"
            )
        stacked = [p for p in prefixes if len(base.info(_marker_of(self.layout, p)).shape) != 2]
        if stacked:
            raise InputError(
                f"{stacked[0]} is a {NAMES[self.method]}-quantized tensor that is not a 2-D linear (a stacked MoE "
                "expert tensor), which gqa-export does not import; export the model's float checkpoint and choose "
                "--precision int4/int8 instead"
            )
        for prefix in prefixes:
            self._add(base, prefix, qc)
        self._hidden = {f"{p}{s}" for p in prefixes for s in HIDDEN[self.layout]}

    def _add(self, base: WeightStore, prefix: str, qc: dict[str, Any]) -> None:
        if self.layout == "bitsandbytes":
            self._virtual[f"{prefix}.weight"] = bnb.bnb_linear(base, prefix)
            return
        if self.layout == "fp8":
            block = qc.get("weight_block_size")
            if self.method == "compressed-tensors":
                block = float_quantized_block(qc["config_groups"], *base.info(f"{prefix}.weight").shape)
                zero = f"{prefix}.weight_zero_point"
                if zero in base and np.any(base.read(zero)):  # FP8 is symmetric: a stored zero point must be 0
                    raise InputError(f"{zero} is not zero; an asymmetric FP8 checkpoint is not imported")
            self._virtual[f"{prefix}.weight"] = fp8_linear(base, f"{prefix}.weight", block)
            return
        if self.method == "quark":
            quark = quark_linear(base, prefix, qc)
            self._native[quark.name] = self._virtual[quark.name] = quark
            return
        for suffix in REQUIRED[self.method]:
            super().info(prefix + suffix)  # present, else one line naming it
        if f"{prefix}.weight" in base:
            raise InputError(f"{prefix} has both a float weight and quantized tensors; the checkpoint is inconsistent")
        if self.method == "gptq":
            fmt = str(qc.get("checkpoint_format") or qc.get("format") or "gptq")
            linear: NativeLinear = gptq_linear(self, prefix, qc, v1=fmt == "gptq")
        elif self.method == "awq":
            linear = awq_linear(self, prefix, qc)
        else:
            bits = next(iter(qc["config_groups"].values()))["weights"]["num_bits"]
            linear = packed_linear(self, prefix, int(bits))
        self._native[linear.name] = self._virtual[linear.name] = linear

    def native(self, name: str) -> NativeLinear | None:
        """The integers of a weight MatMulNBits can take as they are (GPTQ, AWQ, pack-quantized)."""
        return self._native.get(name)

    def virtual(self) -> list[str]:
        """Every weight this store dequantizes on read (all the checkpoint's quantized linears)."""
        return list(self._virtual)

    def names(self) -> list[str]:
        stored = super().names()
        shown = set(stored)
        return [n for n in stored if n not in self._hidden] + [n for n in self._virtual if n not in shown]

    def __contains__(self, name: str) -> bool:
        return name in self._virtual or (name not in self._hidden and super().__contains__(name))

    def info(self, name: str) -> TensorInfo:
        linear = self._virtual.get(name)
        if linear is None:
            return super().info(name)
        return TensorInfo(name, super().info(self._source(name)).shard, "F32", (linear.n, linear.k))

    def view(self, name: str) -> np.ndarray:
        linear = self._virtual.get(name)
        return super().view(name) if linear is None else linear.dequantized_rows(0, linear.n)

    def read_slices(self, name: str, *index: slice | int) -> np.ndarray:
        linear = self._virtual.get(name)
        if linear is None:
            return super().read_slices(name, *index)
        self.reads += 1
        rows = index[0] if index and isinstance(index[0], slice) else slice(None)
        a, b, _ = rows.indices(linear.n)
        block = linear.dequantized_rows(a, b)
        return np.ascontiguousarray(block[(slice(None), *index[1:])])

    def release(self, name: str) -> None:
        super().release(self._source(name) if name in self._virtual else name)

    def _source(self, name: str) -> str:
        return _marker_of(self.layout, name.removesuffix(".weight"))


def _float_quantized(qc: dict[str, Any]) -> bool:
    groups = (qc.get("config_groups") or {}).values()
    return any(str((g or {}).get("format") or qc.get("format") or "") == "float-quantized" for g in groups)


def _marker_of(method: str, prefix: str) -> str:
    """The stored tensor that holds a quantized module's codes."""
    return prefix + (".weight" if method in IN_PLACE else MARKER[method])
