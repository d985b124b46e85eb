"""GGML blocks read as codes, scales and mins (source/gguf/blocks.py) against the `gguf` package.

Every integer type gqa-export keeps must mean, weight by weight, exactly what llama.cpp's own
Python dequantizer computes from the same bytes: bit-for-bit equal float32, on random blocks
(every bit pattern of codes, scales and mins; finite fp16 super-block scales). Planted layout bugs
(a K-quant's second and third sub-block scales exchanged, a min's sign flipped, Q3_K's high bit
read inverted) must break the equality, so the check bites.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_export.source.gguf import blocks
from gqa_export.source.gguf.blocks import FORMS, decode_rows, dequantize_rows, type_sizes, weights

# byte offsets of each type's fp16 fields (random bytes there could be inf/nan)
HALVES = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q2_K": [80, 82],
          "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}  # fmt: skip


def random_rows(type_name: str, rows: int = 6, blocks_per_row: int = 3, seed: int = 0) -> np.ndarray:
    size = type_sizes(type_name)[1]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, blocks_per_row, size), dtype=np.uint8)
    for offset in HALVES[type_name]:
        half = (rng.standard_normal((rows, blocks_per_row, 1)) * 0.02).astype(np.float16)
        raw[..., offset : offset + 2] = half.view(np.uint8)
    return raw.reshape(rows, -1)


def decoded_equals_dequantizer(type_name: str) -> bool:
    raw = random_rows(type_name)
    got = weights(FORMS[type_name], decode_rows(FORMS[type_name], raw))
    return bool(np.array_equal(got, dequantize_rows(type_name, raw)))


@pytest.mark.parametrize("type_name", list(FORMS))
def test_decoded_blocks_equal_the_gguf_dequantizer_bit_for_bit(type_name):
    form = FORMS[type_name]
    raw = random_rows(type_name)
    codes, scales, mins = decode_rows(form, raw)
    assert codes.dtype == np.uint8 and int(codes.max()) < 1 << form.bits  # fits the MatMulNBits storage
    assert scales.shape == (raw.shape[0], codes.shape[1] // form.block)
    assert (mins is not None) == form.mins
    assert decoded_equals_dequantizer(type_name)


def _swap_second_and_third(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    out[..., [1, 2]] = out[..., [2, 1]]
    return out


def test_mutant_k_quant_sub_block_scales_exchanged(monkeypatch):
    """The 6-bit scales of sub-blocks 1 and 2 read in each other's place (a get_scale_min_k4 slip)."""
    original = blocks.k_scale_min
    monkeypatch.setattr(blocks, "k_scale_min", lambda raw: (_swap_second_and_third(original(raw)[0]), original(raw)[1]))
    assert not decoded_equals_dequantizer("Q4_K")
    assert not decoded_equals_dequantizer("Q5_K")


@pytest.mark.parametrize("type_name", ["Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K"])
def test_mutant_min_sign_flipped(monkeypatch, type_name):
    form = FORMS[type_name]

    def flipped(b: np.ndarray):
        codes, scales, mins = form.decode(b)
        return codes, scales, -mins

    monkeypatch.setitem(FORMS, type_name, blocks.BlockForm(**{**form.__dict__, "decode": flipped}))
    assert not decoded_equals_dequantizer(type_name)


def test_mutant_q3_k_high_bit_inverted(monkeypatch):
    """Q3_K's offset is 4 when the hmask bit is *clear* (ggml's own comment calls it strange)."""
    form = FORMS["Q3_K"]

    def inverted_high(b: np.ndarray):
        codes, scales, mins = form.decode(b)
        bit = ((codes - 4) >> 2) & 1
        return (codes - 4 * bit + 4 * (1 - bit)).astype(np.uint8), scales, mins

    monkeypatch.setitem(FORMS, "Q3_K", blocks.BlockForm(**{**form.__dict__, "decode": inverted_high}))
    assert not decoded_equals_dequantizer("Q3_K")
