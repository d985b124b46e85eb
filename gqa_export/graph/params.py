"""Checkpoint tensors as lazy onnx-ir tensors in the graph's layout and dtype.

Nothing is read here. Each initializer is a `StreamedTensor`: when the saver writes it
(`tofile`), it reads its source tensors from the `WeightStore` a block of rows at a time,
transposes/concatenates them (packed QKV, gate+up), casts to the target dtype and writes the
block, so peak memory is one block (`CHUNK_BYTES`), not one tensor; a 128k-vocab embedding never
sits in memory whole. `numpy()` still materializes the full tensor for stages that need it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import IO

import ml_dtypes
import numpy as np
import onnx_ir as ir

from gqa_export.kernels import convert
from gqa_export.source.weights import WeightStore

NUMPY_DTYPES: dict[ir.DataType, np.dtype] = {
    ir.DataType.FLOAT: np.dtype(np.float32),
    ir.DataType.FLOAT16: np.dtype(np.float16),
    ir.DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}


F32 = np.dtype(np.float32)
MAPPED_BYTES = 64 << 20  # source bytes one column read may map (see Params._columns)
CHUNK_BYTES = 8 << 20
# A transposed weight whose blocks would be narrower than this many rows (a 128k-vocab lm_head:
# 32 rows of 128k) is written in place by bands of source rows instead (Params._scatter).
MIN_SLAB_ROWS = 64
# ir.Value.meta key on lookup tables that int4/int8 builds quantize by default, like a tied
# embedding (Gemma-4's per-layer-embedding table: ~60% of E2B's parameters, one row read per token)
QUANTIZE_TABLE_META = "gqa_export.quantize_table"
# an initializer kept in float32 in an fp16 / bf16 graph on purpose (a router the family computes in
# fp32, graph/moe.py): quantize.py leaves it float and in its dtype
WIDER_THAN_IO_META = "gqa_export.wider_than_io"


class StreamedTensor(ir.LazyTensor):
    """A lazy tensor produced as blocks in row-major order; `tofile` writes block by block."""

    __slots__ = ("_blocks", "experts", "release", "scatter", "selected", "source_rows", "sources", "stored")

    def __init__(self, blocks: Callable[[], Iterator[np.ndarray]], dtype: ir.DataType, shape: Sequence[int]) -> None:
        dims = tuple(int(d) for d in shape)
        super().__init__(
            lambda: ir.Tensor(np.concatenate([b.reshape(-1) for b in blocks()]).reshape(dims)),
            dtype=dtype,
            shape=ir.Shape(shape),
        )
        self._blocks = blocks
        # For a MatMul weight [K, N]: rows [a, b) of its transpose [N, K] straight from the source,
        # so the quantizer never materializes or re-transposes the float matrix.
        self.source_rows: Callable[[int, int], np.ndarray] | None = None
        # Called by whoever read the source blocks once done with them (WeightStore.release)
        self.release: Callable[[], None] = lambda: None
        # Set where streaming in row order would be slow: `scatter(write_at)` writes the same bytes
        # out of order through write_at(offset in the tensor, bytes); the writer honours it.
        self.scatter: Callable[[Callable[[int, memoryview], None]], None] | None = None
        # The HF Linear weights [out, in] this MatMul weight concatenates on `out` (matmul_weight):
        # a pre-quantized checkpoint's integers are imported by these names (quant/imported.py)
        self.sources: tuple[str, ...] = ()
        # One HF Linear weight read otherwise (a GGUF's integer blocks are imported by these,
        # quant/gguf_import.py): `selected` its output rows in this order (matmul_rows: a fused qkv taken
        # q | k | v), `stored` a weight stored as MatMul's [in, out] already (matmul_stored: GPT-2's Conv1D)
        self.selected: tuple[str, np.ndarray] | None = None
        self.stored: str | None = None
        # For a stacked MoE expert tensor: the checkpoint layout it reads (graph/experts.ExpertLayout),
        # so that pre-quantized experts can be imported by their per-expert names (quant/imported_experts.py)
        self.experts: object | None = None

    def blocks(self) -> Iterator[np.ndarray]:
        """The tensor's values as consecutive row-major blocks (each <= CHUNK_BYTES)."""
        return self._blocks()

    def tofile(self, file: IO[bytes]) -> None:
        for block in self._blocks():
            file.write(memoryview(np.ascontiguousarray(block).reshape(-1).view(np.uint8)))


def row_blocks(rows: int, row_bytes: int) -> Iterator[tuple[int, int]]:
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


class Params:
    """Factory of lazy initializer tensors, cast to `dtype`."""

    def __init__(self, store: WeightStore, dtype: ir.DataType) -> None:
        self.store = store
        self.dtype = dtype
        self._np_dtype = NUMPY_DTYPES[dtype]

    def cast(self, array: np.ndarray) -> np.ndarray:
        # through float32, so that bf16 <-> fp16 conversions round once, as torch does
        return convert(array, self._np_dtype)

    def _lazy(self, shape: Sequence[int], make: Callable[[], np.ndarray]) -> ir.LazyTensor:
        def evaluate() -> ir.TensorProtocol:
            return ir.Tensor(np.ascontiguousarray(self.cast(make())))

        return ir.LazyTensor(evaluate, dtype=self.dtype, shape=ir.Shape(shape))

    def held_bias(self, weight_name: str) -> str | None:
        """The bias stored beside `weight_name` (`<module>.bias` for `<module>.weight`) where the
        checkpoint holds one: LayerNorm and Linear modules built with or without bias by a flag."""
        bias_name = weight_name.removesuffix("weight") + "bias"
        return bias_name if bias_name in self.store else None

    def computed(self, shape: Sequence[int], make: Callable[[], np.ndarray]) -> ir.LazyTensor:
        """A tensor computed from stored ones only when it is written (multi-head latent
        attention's per-head blocks of kv_b_proj), in the target dtype."""
        return self._lazy(shape, make)

    def matmul_weight(self, names: Sequence[str]) -> StreamedTensor:
        """HF Linear weights [out_i, in], concatenated on `out`, transposed to MatMul's [in, out].

        Block k of the output is rows [a, b) of the transposed matrix: columns [a, b) of every
        source, read as strided slices.
        """
        infos = [self.store.info(n) for n in names]
        in_dim, out_dim = infos[0].shape[1], sum(i.shape[0] for i in infos)
        row_bytes = out_dim * self._np_dtype.itemsize

        def blocks() -> Iterator[np.ndarray]:
            for a, b in row_blocks(in_dim, row_bytes):
                cols = [self._columns(n, a, b) for n in names]
                yield convert(cols[0] if len(cols) == 1 else np.concatenate(cols, axis=0), self._np_dtype, True)
            tensor.release()

        tensor = StreamedTensor(blocks, self.dtype, (in_dim, out_dim))
        tensor.source_rows = lambda a, b: self._source_rows(names, a, b)
        tensor.release = lambda: self._release(names)
        tensor.sources = tuple(names)
        if CHUNK_BYTES // row_bytes < min(MIN_SLAB_ROWS, in_dim):
            tensor.scatter = lambda write_at: self._scatter(names, in_dim, out_dim, write_at)
        return tensor

    def matmul_rows(self, name: str, runs: Sequence[tuple[int, int]]) -> StreamedTensor:
        """A selection of one HF Linear weight's output rows, in the order of `runs` ([start, stop)
        row ranges), transposed to MatMul's [in, out]: a projection whose checkpoint fuses several
        ones row group by row group (Qwen3-Next's per-key-head in_proj_qkvz). Streamed like
        `matmul_weight`: each block reads a column slab of the source and keeps the selected rows,
        so the reordered matrix is never held whole."""
        in_dim = self.store.info(name).shape[1]
        out_dim = sum(stop - start for start, stop in runs)

        def blocks() -> Iterator[np.ndarray]:
            for a, b in row_blocks(in_dim, out_dim * self._np_dtype.itemsize):
                cols = self._columns(name, a, b)
                yield convert(np.concatenate([cols[start:stop] for start, stop in runs]), self._np_dtype, True)
            tensor.release()

        def source_rows(a: int, b: int) -> np.ndarray:
            parts, offset = [], 0
            for start, stop in runs:
                lo, hi = max(a, offset), min(b, offset + stop - start)
                if lo < hi:
                    rows = (start + lo - offset, start + hi - offset)
                    parts.append(convert(self.store.read(name, rows=rows), F32))
                offset += stop - start
            return np.concatenate(parts, axis=0)

        tensor = StreamedTensor(blocks, self.dtype, (in_dim, out_dim))
        tensor.source_rows = source_rows
        tensor.release = lambda: self.store.release(name)
        tensor.selected = (name, np.concatenate([np.arange(start, stop) for start, stop in runs]))
        return tensor

    def matmul_stored(self, name: str) -> StreamedTensor:
        """A weight stored as MatMul's [in, out] already (GPT-2's Conv1D), streamed in row blocks
        as stored; the quantizer's [out, in] rows are columns of it, transposed."""
        in_dim, out_dim = self.store.info(name).shape

        def blocks() -> Iterator[np.ndarray]:
            for a, b in row_blocks(in_dim, out_dim * self._np_dtype.itemsize):
                yield self.cast(self.store.read(name, rows=(a, b)))
            tensor.release()

        tensor = StreamedTensor(blocks, self.dtype, (in_dim, out_dim))
        tensor.source_rows = lambda a, b: np.ascontiguousarray(convert(self._columns(name, a, b), F32).T)
        tensor.release = lambda: self.store.release(name)
        tensor.stored = name
        return tensor

    def _scatter(
        self, names: Sequence[str], in_dim: int, out_dim: int, write_at: Callable[[int, memoryview], None]
    ) -> None:
        """The transposed matrix [in, out] written in place: each band of whole source rows (one
        contiguous read) is transposed to [in, band] and written as `in` segments, each at its
        row's offset. Every source byte is read once, where row-order blocks of a very wide
        output would each read a thin column slab of every row."""
        itemsize, column = self._np_dtype.itemsize, 0
        for name in names:
            rows = self.store.info(name).shape[0]
            band = max(1, MAPPED_BYTES // (in_dim * 4))
            for r0 in range(0, rows, band):
                r1 = min(rows, r0 + band)
                piece = convert(self.store.read(name, rows=(r0, r1)), self._np_dtype, True)  # [in, r1 - r0]
                raw = piece.view(np.uint8).reshape(in_dim, -1)
                for k in range(in_dim):
                    write_at((k * out_dim + column + r0) * itemsize, memoryview(raw[k]))
            self.store.release(name)
            column += rows

    def _release(self, names: Sequence[str]) -> None:
        for name in names:
            self.store.release(name)

    def _columns(self, name: str, a: int, b: int) -> np.ndarray:
        """Columns [a, b) of a 2-D source tensor, read a band of rows at a time.

        A column slab touches a page in every row of the memory-mapped shard, and the mapped pages
        count in the process's RSS until the read returns: for a 128k-vocab lm_head that is the
        whole tensor. Bands of at most MAPPED_BYTES of source rows keep that bounded."""
        rows, cols = self.store.info(name).shape
        band = max(1, MAPPED_BYTES // max(1, cols * 2))
        if rows <= band:
            return self.store.read(name, cols=(a, b))
        return np.concatenate([self.store.read(name, rows=(r, min(rows, r + band)), cols=(a, b))
                               for r in range(0, rows, band)])  # fmt: skip

    def _source_rows(self, names: Sequence[str], a: int, b: int) -> np.ndarray:
        """Rows [a, b) of the concatenated HF weights [out, in] as float32: the quantizer's view."""
        parts, offset = [], 0
        for name in names:
            rows = self.store.info(name).shape[0]
            lo, hi = max(a, offset), min(b, offset + rows)
            if lo < hi:
                parts.append(convert(self.store.read(name, rows=(lo - offset, hi - offset)), F32))
            offset += rows
        return np.concatenate(parts, axis=0)

    def vector(self, names: Sequence[str], offset: float = 0.0) -> ir.LazyTensor:
        """1-D tensors (norm weights, biases), concatenated; `offset` for (1 + w) norms."""
        length = sum(self.store.info(n).shape[0] for n in names)

        def make() -> np.ndarray:
            v = np.concatenate([self.store.read(n) for n in names])
            return v.astype(np.float32) + np.float32(offset) if offset else v

        return self._lazy((length,), make)

    def vector_rows(self, name: str, runs: Sequence[tuple[int, int]]) -> ir.LazyTensor:
        """Entries of one 1-D tensor in the order of `runs` ([start, stop) ranges): the bias of a
        fused projection whose weight rows `matmul_rows` selects."""
        length = sum(stop - start for start, stop in runs)

        def make() -> np.ndarray:
            v = self.store.read(name)
            return np.concatenate([v[start:stop] for start, stop in runs])

        return self._lazy((length,), make)

    def derived(
        self, name: str, fn: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...] | None = None
    ) -> ir.LazyTensor:
        """One tensor through `fn` in float32, for a constant the model computes from a parameter
        in fp32 (Qwen3.5's decay scale -exp(A_log)): computed once here, not per run. `shape` when
        `fn` reshapes it (Mamba2's D as [heads, 1])."""
        shape = tuple(self.store.info(name).shape) if shape is None else shape
        return self._lazy(shape, lambda: fn(convert(self.store.read(name), F32)))

    def tensor(self, name: str) -> ir.LazyTensor:
        """One tensor as stored, in its own shape (a depthwise convolution's [C, 1, K] kernel)."""
        return self._lazy(tuple(self.store.info(name).shape), lambda: self.store.read(name))

    def stacked(self, names: Sequence[str]) -> ir.LazyTensor:
        """Tensors as stored, concatenated on their first axis: depthwise kernels [C_i, 1, K] that
        one convolution over the concatenated channels stands for (OLMo-Hybrid's q/k/v_conv1d)."""
        infos = [self.store.info(n).shape for n in names]
        shape = (sum(int(s[0]) for s in infos), *(int(d) for d in infos[0][1:]))
        return self._lazy(shape, lambda: np.concatenate([self.store.read(n) for n in names], axis=0))

    def flat(self, names: Sequence[str]) -> ir.LazyTensor:
        """Tensors of any shape, flattened and concatenated (per-head norm weights)."""
        length = sum(int(np.prod(self.store.info(n).shape)) for n in names)
        return self._lazy((length,), lambda: np.concatenate([self.store.read(n).reshape(-1) for n in names]))

    def matrix(self, name: str) -> StreamedTensor:
        """A 2-D tensor as stored (the embedding table), streamed in row blocks."""
        rows, cols = self.store.info(name).shape

        def blocks() -> Iterator[np.ndarray]:
            for a, b in row_blocks(rows, cols * 4):
                yield self.cast(self.store.read(name, rows=(a, b)))
            tensor.release()

        tensor = StreamedTensor(blocks, self.dtype, (rows, cols))
        tensor.release = lambda: self.store.release(name)
        tensor.source_rows = lambda a, b: convert(self.store.read(name, rows=(a, b)), F32)
        return tensor

    def table(self, array: np.ndarray) -> ir.Tensor:
        """A computed float table (cos/sin caches) in the target dtype."""
        return ir.Tensor(np.ascontiguousarray(self.cast(array)))
