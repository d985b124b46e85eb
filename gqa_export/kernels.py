"""Array conversions at memory speed: dtype casts and 2-D transposes run by onnxruntime.

The export's hot loop turns checkpoint rows into graph bytes: bf16 -> fp32/fp16 casts and, for
every MatMul weight, HF's [out, in] transposed to [in, out]. numpy's float32 -> float16 cast is a
scalar loop and its transposed copies walk memory one element at a time; onnxruntime's CPU Cast
and Transpose kernels are vectorized, run on its intra-op threads and release the GIL, so the
writer thread keeps writing meanwhile (measured in benchmarks/results/export_speed.md).

Semantics are numpy's, element for element: bf16 -> fp32 is exact, fp32 -> fp16 / bf16 rounds to
nearest even; a cast between two 16-bit types goes through float32 and rounds once, as torch does
(tests/base/test_kernels.py checks every path against numpy, NaN, infinities and subnormals included).
Tiny arrays take the numpy path: a session call costs more than the copy.
"""

from __future__ import annotations

import os
import threading
from functools import cache

import ml_dtypes
import numpy as np

SMALL_ELEMENTS = 1 << 14
_F32 = np.dtype(np.float32)
_ONNX_TYPES = {np.dtype(np.float32): 1, np.dtype(np.float16): 10, np.dtype(ml_dtypes.bfloat16): 16}
_lock = threading.Lock()


def convert(array: np.ndarray, dtype: np.dtype, transpose: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """`array` cast to `dtype` (through float32) and, with `transpose`, its 2-D transpose, as a
    C-contiguous array (written into `out` when given: it must be C-contiguous of the result's
    shape and dtype). Without a transpose, an array already in `dtype` is returned as is."""
    dtype = np.dtype(dtype)
    if not transpose and array.dtype == dtype and out is None:
        return array
    shape = array.shape[::-1] if transpose else array.shape
    if out is None:
        out = np.empty(shape, dtype)
    assert out.shape == shape and out.dtype == dtype and out.flags.c_contiguous
    if array.size < SMALL_ELEMENTS or array.dtype not in _ONNX_TYPES or dtype not in _ONNX_TYPES:
        view = array.T if transpose else array
        out[...] = view if view.dtype == dtype else view.astype(_F32).astype(dtype)
        return out
    if transpose and array.ndim != 2:
        raise ValueError(f"convert transposes 2-D arrays, got shape {array.shape}")
    import onnxruntime as ort

    session = _session(array.dtype, dtype, transpose, array.ndim)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", _ort_value(ort, np.ascontiguousarray(array)))
    binding.bind_ortvalue_output("y", _ort_value(ort, out))
    session.run_with_iobinding(binding)
    return out


def _ort_value(ort, array: np.ndarray):  # -> ort.OrtValue over the array's own buffer
    if array.dtype == ml_dtypes.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), 16)
    return ort.OrtValue.ortvalue_from_numpy(array)


@cache
def _session(source: np.dtype, target: np.dtype, transpose: bool, rank: int):  # -> ort.InferenceSession
    """One small graph per (source, target, transpose, rank): Cast to float32, Cast to target,
    Transpose; the casts that are identities left out."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    nodes, current = [], "x"
    steps: list[tuple[str, dict]] = []
    if source != target:
        if source != _F32:
            steps.append(("Cast", {"to": 1}))
        if target != _F32:
            steps.append(("Cast", {"to": _ONNX_TYPES[target]}))
    if transpose:
        steps.append(("Transpose", {"perm": [1, 0]}))
    if not steps:
        steps.append(("Identity", {}))
    for i, (op, attrs) in enumerate(steps):
        output = "y" if i == len(steps) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [current], [output], **attrs))
        current = output
    dims = [f"d{i}" for i in range(rank)]
    graph = helper.make_graph(
        nodes,
        "convert",
        [helper.make_tensor_value_info("x", _ONNX_TYPES[source], dims)],
        [helper.make_tensor_value_info("y", _ONNX_TYPES[target], dims[::-1] if transpose else dims)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    # Idle ORT threads must not spin: the writer thread needs that core between calls.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with _lock:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
