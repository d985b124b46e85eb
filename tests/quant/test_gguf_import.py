"""GGUF integer blocks in MatMulNBits (quant/gguf_import.py), checked weight by weight through onnxruntime.

For each GGML type, one linear layer over a GGUF weight is imported, saved and run on the identity
(gguf_reference.effective_weights): what onnxruntime computes for every weight must equal, bit for
bit, the `gguf` package's dequantization of the same bytes (q_proj: its rows un-permuted as
well). The min-carrying types must go through their block-sum correction; a planted layout bug in
the reader (a K-quant's sub-block scales exchanged, a min's sign flipped) must break the equality.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf_reference import effective_weights

from gqa_export.source.gguf import blocks
from gqa_export.source.gguf.blocks import FORMS

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
WEIGHTS = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]


@pytest.mark.parametrize("type_name", [*TYPES, "F16"])
def test_package_weights_equal_the_gguf_dequantizer(ggufs, type_name):
    path = ggufs.get("llama256", type_name)
    for name in WEIGHTS:
        got, ref, ops = effective_weights(path, name)
        assert np.array_equal(got, ref), f"{name}: max |diff| {np.abs(got - ref).max()}"
        if type_name == "F16":
            assert ops == ["MatMul"]
            continue
        form = FORMS[type_name]
        assert ops.count("MatMulNBits") == 1
        assert ("ReduceSum" in ops) == form.mins  # only the types with mins carry a correction


def test_int4_requantizes_8_bit_forms_and_keeps_4_bit_ones(ggufs):
    """--precision int4: a Q8_0 weight is read as float for the precision stage to re-quantize; a
    Q4_K one keeps its blocks (a 4-bit form)."""
    q8 = ggufs.get("llama256", "Q8_0")
    got, ref, ops = effective_weights(q8, WEIGHTS[0], precision="int4")
    assert ops == ["MatMul"]  # left float here: quantize() makes it int4 afterwards
    assert np.array_equal(got, ref)
    q4k = ggufs.get("llama256", "Q4_K")
    got, ref, ops = effective_weights(q4k, WEIGHTS[0], precision="int4")
    assert "MatMulNBits" in ops and np.array_equal(got, ref)


def test_mutant_sub_block_scales_exchanged_breaks_the_weights(ggufs, monkeypatch):
    path = ggufs.get("llama256", "Q4_K")
    original = blocks.k_scale_min

    def swapped(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scales, mins = original(raw)
        scales = scales.copy()
        scales[..., [1, 2]] = scales[..., [2, 1]]
        return scales, mins

    monkeypatch.setattr(blocks, "k_scale_min", swapped)
    got, ref, _ = effective_weights(path, WEIGHTS[1])
    assert not np.allclose(got, ref, atol=1e-3)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q4_K"])
def test_mutant_min_sign_flipped_breaks_the_weights(ggufs, monkeypatch, type_name):
    path = ggufs.get("llama256", type_name)
    form = FORMS[type_name]

    def flipped(b: np.ndarray):
        codes, scales, mins = form.decode(b)
        return codes, scales, -mins

    monkeypatch.setitem(FORMS, type_name, blocks.BlockForm(**{**form.__dict__, "decode": flipped}))
    got, ref, _ = effective_weights(path, WEIGHTS[1])
    assert not np.allclose(got, ref, atol=1e-3)
