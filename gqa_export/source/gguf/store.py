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
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.gguf import gpt_oss
from gqa_export.source.gguf.blocks import (
    EXACT_FLOAT_TYPES,
    FLOAT_TYPES,
    FORMS,
    BlockForm,
    Decoded,
    decode_rows,
    dequantize_rows,
    type_sizes,
    zero_points_and_residual,
)
from gqa_export.source.gguf.container import GgufFile
from gqa_export.source.gguf.names import Mapped, map_tensors
from gqa_export.source.native import NativeLinear
from gqa_export.source.weights import TensorInfo, WeightStore


def _has_dequantizer(type_name: str) -> bool:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import _type_traits

    return GGMLQuantizationType[type_name] in _type_traits


@dataclass
class GgufLinear:
    """One quantized 2-D weight [N, K] (HF layout) in its GGML blocks: the import step's view."""

    name: str  # the HF weight name
    type_name: str
    data: np.ndarray  # uint8 [N, bytes per row]: the tensor's (or one expert's) blocks in the file
    form: BlockForm
    rows: np.ndarray | None  # HF row r is file row rows[r] (a selection may take fewer)
    store: GgufStore
    k: int

    @property
    def n(self) -> int:
        return int(self.data.shape[0] if self.rows is None else self.rows.size)

    def raw_rows(self, a: int, b: int) -> np.ndarray:
        return np.asarray(self.data[a:b] if self.rows is None else self.data[self.rows[a:b]])

    def decoded(self, a: int, b: int) -> Decoded:
        """codes uint8 [b - a, K], scales float32 and mins (or None) [b - a, K / block] of HF rows a..b."""
        return decode_rows(self.form, self.raw_rows(a, b))


class GgufExpertLinear(NativeLinear):
    """A GGUF weight as the `NativeLinear` the pre-quantized MoE import takes (quant/imported_experts.py:
    QMoE, or per-expert MatMulNBits): the same codes and scales; a form with mins as zero points
    round(m / s) and the residual s z - m per block (`block_residual`, blocks.zero_points_and_residual)."""

    linear: GgufLinear
    residual: Callable[[], np.ndarray | None]

    def __post_init__(self) -> None:  # symmetric is the form's (set by expert_linear), not decoded
        pass

    def codes(self, a: int, b: int) -> np.ndarray:
        return self.linear.decoded(a, b)[0]

    def block_residual(self) -> np.ndarray | None:
        return self.residual()


def expert_linear(linear: GgufLinear) -> GgufExpertLinear:
    form = linear.form
    default = form.offset == 1 << (form.bits - 1) and not form.mins
    cache: list[np.ndarray] = []  # scales, and for a form with mins its zero points and residual

    def decoded() -> list[np.ndarray]:
        if not cache:  # one expert matrix's: small, asked for several times
            parts = [linear.decoded(a, b) for a, b in _row_blocks(linear.n, linear.k)]
            cache.append(np.concatenate([p[1] for p in parts]))
            if form.mins:
                cache.extend(zero_points_and_residual(form, cache[0], np.concatenate([p[2] for p in parts])))
        return cache

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        scales = decoded()[0]
        if form.mins:
            return scales, decoded()[1]
        return scales, None if default else np.full(scales.shape, form.offset, np.uint8)

    made = GgufExpertLinear(linear.name, f"gguf {form.type_name}", linear.store, linear.name, linear.n, linear.k,
                            form.bits, form.block, form.block, params, None, default)  # fmt: skip
    made.linear = linear
    made.residual = lambda: decoded()[2] if form.mins else None
    return made


def map_file(arch: str, names: list[str], shapes: dict[str, tuple[int, ...]], config: dict) -> dict[str, Mapped]:
    """HF name -> Mapped for every tensor of a file: gpt-oss's split experts rebuilt (gpt_oss.py), every
    other architecture through the name tables (names.py)."""
    if arch == "gpt-oss":
        return gpt_oss.map_gpt_oss(names, shapes)
    return map_tensors(arch, names, shapes, config)


def _row_blocks(rows: int, k: int) -> list[tuple[int, int]]:
    step = max(1, (8 << 20) // max(1, 4 * k))
    return [(a, min(rows, a + step)) for a in range(0, rows, step)]


class GgufStore(WeightStore):
    """Every tensor of a GGUF under its HF name (module doc)."""

    def __init__(self, file: GgufFile, config: dict) -> None:
        self.file = file
        shapes = {name: t.shape for name, t in file.tensors.items()}
        self._mapped: dict[str, Mapped] = map_file(file.architecture, list(file.tensors), shapes, config)
        infos = {
            hf: TensorInfo(hf, file.tensors[m.gguf].file, "F32", self._hf_shape(m)) for hf, m in self._mapped.items()
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
        for name in (n for m in self._mapped.values() for n in (m.gguf, m.interleaved) if n is not None):
            kind = self.file.tensors[name].type_name
            if kind in FLOAT_TYPES or kind in FORMS or kind in EXACT_FLOAT_TYPES:
                continue
            if not _has_dequantizer(kind):
                raise InputError(
                    f"{self.file.path.name}: tensor '{name}' is GGML type {kind}, which the installed gguf package "
                    "cannot dequantize; upgrade gguf or re-quantize the model to a K-quant"
                )
            odd.setdefault(kind, name)
        if odd and not self.dequantize:
            kinds = ", ".join(sorted(odd))
            raise InputError(
                f"{self.file.path.name} holds {kinds} tensors (e.g. '{next(iter(odd.values()))}'), which MatMulNBits "
                "cannot hold exactly; pass --dequantize to dequantize them exactly and follow --precision, or use a "
                "Q4_K_M / Q8_0 file"
            )

    # --- what the import step and the manifest ask --------------------------------------------------
    def type_of(self, name: str) -> str:
        m = self._mapped[name]
        kinds = [self.file.tensors[n].type_name for n in (m.gguf, m.interleaved) if n is not None]
        return kinds[0] if len(set(kinds)) == 1 else " + ".join(kinds)

    def mapped(self) -> dict[str, Mapped]:
        return dict(self._mapped)

    def linear(self, name: str, selected: np.ndarray | None = None) -> GgufLinear | None:
        """The file's blocks of a quantized 2-D weight that has an exact MatMulNBits form, else None
        (a float tensor, a type without one, or any tensor when --dequantize was given). Its rows are
        the HF weight's [out, in] rows (a transposed HF tensor, GPT-2's Conv1D [in, out], gives the
        file's rows as they are: MatMulNBits' layout); `selected`: only those HF rows, in that
        order (a fused qkv taken q | k | v)."""
        m = self._mapped.get(name)
        if m is None or self.dequantize:
            return None
        tensor = self.file.tensors[m.gguf]
        form = FORMS.get(tensor.type_name)
        data, shape, _, _ = self._part(m)
        if form is None or len(shape) != 2 or m.offset or shape[1] % form.block or m.interleaved:
            return None
        rows = m.rows
        if selected is not None:
            rows = selected if rows is None else rows[selected]
            if (rows == np.arange(shape[0])).all():
                rows = None
        return GgufLinear(name, tensor.type_name, data, form, rows, self, shape[1])

    def native(self, name: str) -> GgufExpertLinear | None:
        """A quantized weight as the pre-quantized MoE import takes it (QMoE for a form without mins,
        else per-expert MatMulNBits with the block-sum correction of its mins)."""
        linear = self.linear(name)
        return expert_linear(linear) if linear is not None else None

    def _hf_shape(self, m: Mapped) -> tuple[int, ...]:
        shape = self._part(m)[1]
        if gpt_oss.is_composite(m, shape):
            return gpt_oss.hf_shape(m, shape)
        return tuple(reversed(shape)) if m.transposed else m.shape or shape

    def _part(self, m: Mapped) -> tuple[np.ndarray, tuple[int, ...], int, int]:
        """(raw data, HF shape, first byte in the file, bytes) of a mapped tensor: the whole tensor,
        or one expert of a stacked one."""
        tensor = self.file.tensors[m.gguf]
        if m.expert is None:
            return tensor.data, tensor.shape, tensor.offset, tensor.nbytes
        per = tensor.nbytes // tensor.shape[0]
        return tensor.data[m.expert], tensor.shape[1:], tensor.offset + m.expert * per, per

    # --- the WeightStore interface: float32 in HF layout ---------------------------------------------
    def view(self, name: str) -> np.ndarray:
        return self.read_slices(name)

    def read_slices(self, name: str, *index: slice | int) -> np.ndarray:
        self.reads += 1
        m = self._mapped[name]
        tensor = self.file.tensors[m.gguf]
        data, shape, _, _ = self._part(m)
        try:
            if gpt_oss.is_composite(m, shape):  # gpt-oss's split experts and biases, rebuilt
                out = gpt_oss.read(m, shape, index, self._file_rows)
            elif m.transposed:  # HF [in, out] of the file's [out, in]: read the file's block, transposed
                rows = index[0] if index else slice(None)
                cols = index[1] if len(index) > 1 else slice(None)
                if isinstance(rows, int) or isinstance(cols, int) or len(index) > 2:
                    out = self._whole(tensor.type_name, data, shape, m).T[index]
                else:
                    out = self._matrix(tensor.type_name, data, shape, m, cols, rows).T
            elif m.shape is not None:  # the same values in HF's shape (LFM2's [C, 1, L] kernels)
                whole = self._whole(tensor.type_name, data, shape, m).reshape(m.shape)
                out = whole[index] if index else whole
            elif len(shape) == 2 and not any(isinstance(i, int) for i in index[:2]):
                rows = index[0] if index else slice(None)
                cols = index[1] if len(index) > 1 else slice(None)
                out = self._matrix(tensor.type_name, data, shape, m, rows, cols)
            else:
                whole = self._whole(tensor.type_name, data, shape, m)
                out = whole[index] if index else whole
        except OSError as exc:
            raise InputError(f"cannot read '{m.gguf}' from {tensor.file}: {exc}") from exc
        if not index:
            self.release(name)  # read whole: done with it
        return np.ascontiguousarray(out)

    def _file_rows(self, gguf: str, expert: int | None, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Rows [r0, r1) x columns [c0, c1) of a file tensor [N, K] (or of its expert `expert` of
        [E, N, K]) as float32, decoding only the blocks that cover them."""
        tensor = self.file.tensors[gguf]
        data = tensor.data if expert is None else tensor.data[expert]
        return _dequantized(tensor.type_name, np.asarray(data[r0:r1]), c0, c1)

    def _matrix(
        self, kind: str, data: np.ndarray, shape: tuple[int, ...], m: Mapped, rows: slice, cols: slice
    ) -> np.ndarray:
        n, k = shape
        r0, r1, rs = rows.indices(n)
        c0, c1, cs = cols.indices(k)
        picked = np.arange(r0, r1, rs)
        contiguous = m.rows is None and rs == 1
        raw = data[r0:r1] if contiguous else data[picked if m.rows is None else m.rows[picked]]
        out = _dequantized(kind, np.asarray(raw), c0, c1)
        out = out[:, ::cs] if cs != 1 else out
        return out - np.float32(m.offset) if m.offset else out

    def _whole(self, kind: str, data: np.ndarray, shape: tuple[int, ...], m: Mapped) -> np.ndarray:
        raw = np.asarray(data)
        if kind == "BF16":
            values = raw.view(ml_dtypes.bfloat16).astype(np.float32)
        elif kind in ("F32", "F16", "F64"):
            values = raw.astype(np.float32)
        else:
            values = dequantize_rows(kind, raw.reshape(-1, raw.shape[-1]))
        values = values.reshape(shape)
        if m.rows is not None:
            values = values[m.rows]
        return values - np.float32(m.offset) if m.offset else values

    def release(self, name: str) -> None:
        """Drop the tensor's mapped pages from the process's RSS (the page cache keeps them)."""
        m = self._mapped.get(name)
        if m is None:
            return
        parts = [(self.file.tensors[m.gguf].file, *self._part(m)[2:])]
        if m.interleaved is not None:  # gpt-oss: the up tensor read with the gate tensor
            up = self.file.tensors[m.interleaved]
            parts.append((up.file, up.offset, up.nbytes))
        for file, offset, nbytes in parts:
            mapped = self.file.maps.get(file)
            if mapped is None or not hasattr(mapped, "madvise"):
                continue
            begin = offset // mmap.PAGESIZE * mmap.PAGESIZE
            end = min(len(mapped), -(-(offset + nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
            if nbytes and begin < end:
                mapped.madvise(mmap.MADV_DONTNEED, begin, end - begin)


def _dequantized(kind: str, data: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """Columns c0..c1 of rows `data` (file bytes) as float32, decoding only the blocks that cover them."""
    if kind in ("F32", "F16", "F64"):
        return data[:, c0:c1].astype(np.float32)
    if kind == "BF16":
        return data.view(ml_dtypes.bfloat16)[:, c0:c1].astype(np.float32)
    per, size = type_sizes(kind)
    b0, b1 = c0 // per, -(-c1 // per)
    return dequantize_rows(kind, data[:, b0 * size : b1 * size])[:, c0 - b0 * per : c1 - b0 * per]
