"""kernels.convert is numpy's cast (through float32) and transpose, bit for bit, on every path."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gqa_export.kernels import SMALL_ELEMENTS, convert
from gqa_export.quant.nbits import NBitsConfig, quantize_rows

DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-8, 6e-5, 7e-8, 6e-8, 65504.0, 65519.0, 65520.0, 1e5, -1e-40,
            3.0e38, 1.0009765625, 1.00048828125, 2049.0, 2051.0]  # fmt: skip


def reference(array: np.ndarray, dtype: np.dtype, transpose: bool) -> np.ndarray:
    view = array.T if transpose else array
    return np.ascontiguousarray(view if view.dtype == dtype else view.astype(np.float32).astype(dtype))


def bits(array: np.ndarray) -> np.ndarray:
    return array.view({2: np.uint16, 4: np.uint32}[array.dtype.itemsize])


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((300, 257)) * np.exp2(rng.integers(-30, 20, (300, 257)))).astype(np.float32)
    data.flat[: len(SPECIALS)] = SPECIALS
    assert data.size > SMALL_ELEMENTS  # the onnxruntime path
    return data


@pytest.mark.filterwarnings("ignore:overflow")
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("source", DTYPES)
def test_convert_is_numpy_bit_for_bit(values, source, target, transpose):
    array = values.astype(DTYPES[source])
    got = convert(array, DTYPES[target], transpose)
    want = reference(array, DTYPES[target], transpose)
    assert got.flags.c_contiguous and got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(bits(got), bits(want))


@pytest.mark.filterwarnings("ignore:overflow")
def test_small_arrays_and_out_buffers(values):
    small = values[:10, :10].astype(ml_dtypes.bfloat16)
    assert np.array_equal(bits(convert(small, DTYPES["fp16"], True)), bits(reference(small, DTYPES["fp16"], True)))
    buffer = np.zeros((260, 300), np.float32)
    out = convert(values.astype(np.float16), DTYPES["fp32"], True, out=buffer[:257])
    assert np.shares_memory(out, buffer)
    assert np.array_equal(bits(buffer[:257]), bits(reference(values.astype(np.float16), DTYPES["fp32"], True)))
    assert not buffer[257:].any()
    same = values.astype(np.float16)
    assert convert(same, DTYPES["fp16"]) is same  # nothing to do: no copy
    three_d = values.reshape(3, 100, 257)
    assert np.array_equal(bits(convert(three_d, DTYPES["fp16"])), bits(three_d.astype(np.float16)))


@pytest.mark.parametrize("cfg", [NBitsConfig(4, 32), NBitsConfig(4, 16, symmetric=False), NBitsConfig(8, 64)])
@pytest.mark.parametrize("k", [256, 250])
def test_quantize_rows_matches_the_numpy_transpose(cfg, k):
    """The quantizer's [K, N] input is built with convert now; the kernel sees the same floats."""
    from onnxruntime.capi import _pybind_state as ort_c

    w = np.random.default_rng(1).standard_normal((96, k)).astype(np.float32)
    blocks = cfg.k_blocks(k)
    weight = np.zeros((blocks * cfg.block_size, 96), np.float32)
    weight[:k] = w.T
    packed = np.zeros((96, blocks, cfg.blob()), np.uint8)
    scales = np.zeros((96, blocks), np.float32)
    zero_points = np.zeros((96, cfg.zp_cols(k)), np.uint8)
    kernel = {4: ort_c.quantize_matmul_4bits, 8: ort_c.quantize_matmul_8bits}[cfg.bits]
    kernel(packed, weight, scales, zero_points, cfg.block_size, 96, k, cfg.symmetric)
    got = quantize_rows(w, cfg)
    assert np.array_equal(got[0], packed) and np.array_equal(got[1], scales) and np.array_equal(got[2], zero_points)
