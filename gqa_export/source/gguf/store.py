"""A GGUF file seen as the transformers checkpoint it was converted from, streamed from its map.

`GgufStore` is a `WeightStore`: each tensor appears under its HF name and HF layout (names.py:
row permutation and value offset undone) as float32, so every family's graph is built exactly as
for a safetensors checkpoint. Reading a block dequantizes only the GGML blocks that cover it (a
column slab of a K-quant matrix decodes the 256-weight blocks it touches, not the row) straight
out of the memory map, so memory stays at one block, as for safetensors. The import step asks
`linear(name)` for the file's own codes, scales and mins of a quantized matrix (blocks.py) and
moves them into MatMulNBits unchanged (quant/gguf_import.py); `type_of(name)` is the tensor's GGML
type for the manifest.
"""

from __future__ import annotations

import copy
import mmap
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.gguf.blocks import (
    EXACT_FLOAT_TYPES,
    FLOAT_TYPES,
    FORMS,
    BlockForm,
    Decoded,
    decode_rows,
    dequantize_rows,
    type_sizes,
)
from gqa_export.source.gguf.container import GgufFile, GgufTensor
from gqa_export.source.gguf.names import Mapped, map_tensors
from gqa_export.source.weights import TensorInfo, WeightStore


def _has_dequantizer(type_name: str) -> bool:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import _type_traits

    return GGMLQuantizationType[type_name] in _type_traits


@dataclass
class GgufLinear:
    """One quantized 2-D weight [N, K] (HF layout) in its GGML blocks: the import step's view."""

    name: str  # the HF weight name
    tensor: GgufTensor
    form: BlockForm
    rows: np.ndarray | None  # HF row r is file row rows[r]
    store: GgufStore

    @property
    def n(self) -> int:
        return self.tensor.shape[0]

    @property
    def k(self) -> int:
        return self.tensor.shape[1]

    def raw_rows(self, a: int, b: int) -> np.ndarray:
        data = self.tensor.data
        return np.asarray(data[a:b] if self.rows is None else data[self.rows[a:b]])

    def decoded(self, a: int, b: int) -> Decoded:
        """codes uint8 [b - a, K], scales float32 and mins (or None) [b - a, K / block] of HF rows a..b."""
        return decode_rows(self.form, self.raw_rows(a, b))


class GgufStore(WeightStore):
    """Every tensor of a GGUF under its HF name (module doc)."""

    def __init__(self, file: GgufFile, config: dict) -> None:
        self.file = file
        shapes = {name: t.shape for name, t in file.tensors.items()}
        self._mapped: dict[str, Mapped] = map_tensors(file.architecture, list(file.tensors), shapes, config)
        infos = {
            hf: TensorInfo(hf, file.tensors[m.gguf].file, "F32", file.tensors[m.gguf].shape)
            for hf, m in self._mapped.items()
        }
        super().__init__(infos)
        self.dequantize = False

    def for_build(self, dequantize: bool) -> GgufStore:
        """This store for one build: with `dequantize`, every weight is read as float (exact) and
        --precision decides; without it, IQ* / TQ* types (no exact integer form) are refused. A
        type the `gguf` package cannot even dequantize is refused either way."""
        built = copy.copy(self)
        built.dequantize = dequantize
        built.reads = 0
        built._check_types()
        return built

    def _check_types(self) -> None:
        odd: dict[str, str] = {}
        for m in self._mapped.values():
            kind = self.file.tensors[m.gguf].type_name
            if kind in FLOAT_TYPES or kind in FORMS or kind in EXACT_FLOAT_TYPES:
                continue
            if not _has_dequantizer(kind):
                raise InputError(
                    f"{self.file.path.name}: tensor '{m.gguf}' is GGML type {kind}, which the installed gguf package "
                    "cannot dequantize; upgrade gguf or re-quantize the model to a K-quant"
                )
            odd.setdefault(kind, m.gguf)
        if odd and not self.dequantize:
            kinds = ", ".join(sorted(odd))
            raise InputError(
                f"{self.file.path.name} holds {kinds} tensors (e.g. '{next(iter(odd.values()))}'), which MatMulNBits "
                "cannot hold exactly; pass --dequantize to dequantize them exactly and follow --precision, or use a "
                "Q4_K_M / Q8_0 file"
            )

    # --- what the import step and the manifest ask --------------------------------------------------
    def type_of(self, name: str) -> str:
        return self.file.tensors[self._mapped[name].gguf].type_name

    def mapped(self) -> dict[str, Mapped]:
        return dict(self._mapped)

    def linear(self, name: str) -> GgufLinear | None:
        """The file's blocks of a quantized 2-D weight that has an exact MatMulNBits form, else None
        (a float tensor, a type without one, or any tensor when --dequantize was given)."""
        m = self._mapped.get(name)
        if m is None or self.dequantize:
            return None
        tensor = self.file.tensors[m.gguf]
        form = FORMS.get(tensor.type_name)
        if form is None or len(tensor.shape) != 2 or m.offset or tensor.shape[1] % form.block:
            return None
        return GgufLinear(name, tensor, form, m.rows, self)

    # --- the WeightStore interface: float32 in HF layout ---------------------------------------------
    def view(self, name: str) -> np.ndarray:
        return self.read_slices(name)

    def read_slices(self, name: str, *index: slice | int) -> np.ndarray:
        self.reads += 1
        info = self.info(name)
        m = self._mapped[name]
        tensor = self.file.tensors[m.gguf]
        try:
            if len(info.shape) == 2:
                rows = index[0] if index else slice(None)
                cols = index[1] if len(index) > 1 else slice(None)
                out = self._matrix(tensor, m, rows, cols)
            else:
                out = self._whole(tensor, m)[index] if index else self._whole(tensor, m)
        except OSError as exc:
            raise InputError(f"cannot read '{m.gguf}' from {tensor.file}: {exc}") from exc
        if not index:
            self.release(name)  # read whole: done with it
        return np.ascontiguousarray(out)

    def _matrix(self, tensor: GgufTensor, m: Mapped, rows: slice | int, cols: slice | int) -> np.ndarray:
        n, k = tensor.shape
        if isinstance(rows, int) or isinstance(cols, int):
            return self._whole(tensor, m)[rows, cols]
        r0, r1, rs = rows.indices(n)
        c0, c1, cs = cols.indices(k)
        picked = np.arange(r0, r1, rs)
        file_rows = picked if m.rows is None else m.rows[picked]
        contiguous = m.rows is None and rs == 1
        data = tensor.data[r0:r1] if contiguous else tensor.data[file_rows]
        out = self._dequantized(tensor, np.asarray(data), c0, c1)
        out = out[:, ::cs] if cs != 1 else out
        return out - np.float32(m.offset) if m.offset else out

    def _dequantized(self, tensor: GgufTensor, data: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """Columns c0..c1 of rows `data` (file bytes) as float32, decoding only the blocks that cover them."""
        kind = tensor.type_name
        if kind in ("F32", "F16", "F64"):
            return data[:, c0:c1].astype(np.float32)
        if kind == "BF16":
            return data.view(ml_dtypes.bfloat16)[:, c0:c1].astype(np.float32)
        per, size = type_sizes(kind)
        b0, b1 = c0 // per, -(-c1 // per)
        raw = data[:, b0 * size : b1 * size]
        return dequantize_rows(kind, raw)[:, c0 - b0 * per : c1 - b0 * per]

    def _whole(self, tensor: GgufTensor, m: Mapped) -> np.ndarray:
        kind = tensor.type_name
        data = np.asarray(tensor.data)
        if kind == "BF16":
            values = data.view(ml_dtypes.bfloat16).astype(np.float32)
        elif kind in ("F32", "F16", "F64"):
            values = data.astype(np.float32)
        else:
            values = dequantize_rows(kind, data.reshape(-1, data.shape[-1])).reshape(tensor.shape)
        values = values.reshape(tensor.shape)
        if m.rows is not None:
            values = values[m.rows]
        return values - np.float32(m.offset) if m.offset else values

    def release(self, name: str) -> None:
        """Drop the tensor's mapped pages from the process's RSS (the page cache keeps them)."""
        m = self._mapped.get(name)
        if m is None:
            return
        tensor = self.file.tensors[m.gguf]
        mapped = self.file.maps.get(tensor.file)
        if mapped is None or not hasattr(mapped, "madvise") or not tensor.nbytes:
            return
        begin = tensor.offset // mmap.PAGESIZE * mmap.PAGESIZE
        end = min(len(mapped), -(-(tensor.offset + tensor.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
        if begin < end:
            mapped.madvise(mmap.MADV_DONTNEED, begin, end - begin)
