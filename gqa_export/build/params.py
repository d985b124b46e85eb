"""Checkpoint tensors as lazy onnx-ir tensors in the graph's layout and dtype.

Nothing is read here: each initializer is an `ir.LazyTensor` whose function loads its source
tensors from the `WeightStore`, transposes/concatenates them (packed QKV, gate+up) and casts to
the target dtype only when the saver asks for its bytes, then drops them. Peak memory stays at
about one (packed) tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx_ir as ir

from gqa_export.weights import WeightStore

NUMPY_DTYPES: dict[ir.DataType, np.dtype] = {
    ir.DataType.FLOAT: np.dtype(np.float32),
    ir.DataType.FLOAT16: np.dtype(np.float16),
    ir.DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}


class Params:
    """Factory of lazy initializer tensors, cast to `dtype`."""

    def __init__(self, store: WeightStore, dtype: ir.DataType) -> None:
        self.store = store
        self.dtype = dtype
        self._np_dtype = NUMPY_DTYPES[dtype]

    def _cast(self, array: np.ndarray) -> np.ndarray:
        if array.dtype == self._np_dtype:
            return array
        # Go through float32 so that bf16 <-> fp16 conversions round once, as torch does.
        return array.astype(np.float32).astype(self._np_dtype)

    def _lazy(self, shape: Sequence[int], make: callable) -> ir.LazyTensor:  # type: ignore[valid-type]
        def evaluate() -> ir.TensorProtocol:
            return ir.tensor(np.ascontiguousarray(self._cast(make())))

        return ir.LazyTensor(evaluate, dtype=self.dtype, shape=ir.Shape(shape))

    def matmul_weight(self, names: Sequence[str]) -> ir.LazyTensor:
        """HF Linear weights [out_i, in], concatenated on `out`, transposed to MatMul's [in, out]."""
        infos = [self.store.info(n) for n in names]
        rows = sum(i.shape[0] for i in infos)
        return self._lazy(
            (infos[0].shape[1], rows),
            lambda: np.concatenate([self.store.read(n) for n in names], axis=0).T,
        )

    def vector(self, names: Sequence[str], offset: float = 0.0) -> ir.LazyTensor:
        """1-D tensors (norm weights, biases), concatenated; `offset` for (1 + w) norms."""
        length = sum(self.store.info(n).shape[0] for n in names)

        def make() -> np.ndarray:
            v = np.concatenate([self.store.read(n) for n in names])
            return v.astype(np.float32) + np.float32(offset) if offset else v

        return self._lazy((length,), make)

    def matrix(self, name: str) -> ir.LazyTensor:
        """A 2-D tensor as stored (the embedding table)."""
        return self._lazy(self.store.info(name).shape, lambda: self.store.read(name))

    def table(self, array: np.ndarray) -> ir.Tensor:
        """A computed float table (cos/sin caches) in the target dtype."""
        return ir.tensor(np.ascontiguousarray(self._cast(array)))
