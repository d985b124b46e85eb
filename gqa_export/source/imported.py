"""A pre-quantized checkpoint seen as the float model it means, with its integers kept aside.

`ImportedStore` wraps the checkpoint's `WeightStore`: each quantized linear `P` (GPTQ/AWQ's
`P.qweight`, `P.qzeros`, `P.scales`, `P.g_idx`; compressed-tensors' `P.weight_packed`, ...; FP8's
float8 `P.weight` with its scale; Quark's int32 `P.weight` with `P.weight_scale` /
`P.weight_zero_point`) appears as a float `P.weight` [N, K], so every family's graph is built
exactly as for a float checkpoint. Reading that weight dequantizes it (rows on demand); for the
integer formats the quantize stage instead asks `native(name)` and moves the integers into
MatMulNBits unchanged (quant/imported.py). How each format's modules are found, hidden and read
is its record's `Reader` (source/formats.py); which configs are imported: docs/prequantized.md §1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.format_records import Linear, SourceFormat
from gqa_export.source.formats import declared
from gqa_export.source.native import NativeLinear
from gqa_export.source.weights import TensorInfo, WeightStore


class ImportedStore(WeightStore):
    """The checkpoint's tensors, quantized linears shown as float `P.weight` (see module doc)."""

    def __init__(self, base: WeightStore, qc: dict[str, Any]) -> None:
        super().__init__(dict(base._tensors))
        self.quantization = qc
        fmt = declared(qc)
        assert fmt is not None and fmt.reader is not None, "prequantized.imported_config chose a store format"
        self.format: SourceFormat = fmt
        self.reader = fmt.reader
        self._native: dict[str, NativeLinear] = {}
        self._virtual: dict[str, Linear] = {}
        self._hidden: set[str] = set()
        prefixes = self.reader.find(base)
        if not prefixes:
            raise InputError(
                f"this is a pre-quantized {fmt.reported} checkpoint by its config.json, but it stores no "
                "quantized weights; the checkpoint is inconsistent: export the model's float checkpoint instead"
            )
        stacked = [p for p in prefixes if len(base.info(p + self.reader.codes).shape) != 2]
        if stacked:
            raise InputError(
                f"{stacked[0]} is a {fmt.reported}-quantized tensor that is not a 2-D linear (a stacked MoE "
                "expert tensor), which gqa-export does not import; export the model's float checkpoint and choose "
                "--precision int4/int8 instead"
            )
        for prefix in prefixes:
            self._add(base, prefix, qc)
        self._hidden = {f"{p}{s}" for p in prefixes for s in self.reader.hidden}

    def _add(self, base: WeightStore, prefix: str, qc: dict[str, Any]) -> None:
        for suffix in self.reader.required:
            super().info(prefix + suffix)  # present, else one line naming it
        if self.reader.codes != ".weight" and f"{prefix}.weight" in base:
            raise InputError(f"{prefix} has both a float weight and quantized tensors; the checkpoint is inconsistent")
        linear = self.reader.read(self, base, prefix, qc)
        self._virtual[linear.name] = linear
        if self.reader.integers:
            assert isinstance(linear, NativeLinear)
            self._native[linear.name] = linear

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
        """The stored tensor that holds a quantized module's codes."""
        return name.removesuffix(".weight") + self.reader.codes
