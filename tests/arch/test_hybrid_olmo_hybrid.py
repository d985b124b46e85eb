"""Mutants of what OLMo-Hybrid adds to the gated DeltaNet and OLMo-3 mechanisms it reuses
(gqa_export/arch/hybrid_families.py, docs/hybrid-state.md §8.14): each planted into a copy of the
correct registry package (tests/mutants.py) must break HF parity, the registry's check
(tests/arch/test_families.py rows olmo_hybrid, olmo_hybrid_nope), so a graph that dropped the
mechanism fails it.

beta = 2 sigmoid(b) (linear_allow_neg_eigval; the factor halved), the o_norm's own eps 1e-5 (set to
the model's 1e-6), the DeltaNet layers' pre-norm input norm attention_layer_norm (weight x 1.5),
the separate q / k / v projections and conv kernels concatenated in that order (q and k exchanged),
and RoPE on the attention layers where rope_parameters hold a rope_theta (dropped: sin 0, cos 1).
The released layout (no rope_theta: NoPE, beta not doubled) has no initializer to plant into; the
olmo_hybrid_nope row is its check, which a RoPE table of the default theta fails (docs/hybrid-state.md §8.14)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode

KEY_WIDTH = 2 * 16  # tests/dense_models.py olmo_hybrid: 2 key heads of 16


def _swap_q_k(values: np.ndarray, axis: int) -> np.ndarray:
    """q and k blocks (KEY_WIDTH each, first on `axis`) exchanged."""
    q, k, v = np.split(values, [KEY_WIDTH, 2 * KEY_WIDTH], axis=axis)
    return np.concatenate([k, q, v], axis=axis)


MUTANTS = {
    "beta-not-doubled": ("olmo_hybrid", "const.beta_scale*", times(0.5)),
    "input-norm-scaled": ("olmo_hybrid", "model.layers.0.attention_layer_norm.weight", times(1.5)),
    "qkv-q-k-swapped": ("olmo_hybrid", "model.layers.0.linear_attn.qkv_proj.weight", lambda w: _swap_q_k(w, 1)),
    "conv-q-k-swapped": ("olmo_hybrid", "model.layers.0.linear_attn.conv1d.weight", lambda w: _swap_q_k(w, 0)),
    "rope-dropped-sin": ("olmo_hybrid", "sin_cache", times(0.0)),
}


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["olmo_hybrid", "olmo_hybrid_nope"])
def test_the_correct_olmo_hybrid_packages_pass(builds, family):
    assert _parity(builds.package(family), builds.checkpoint(family))


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_olmo_hybrid_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    family, pattern, change = MUTANTS[mutant]
    broken = copy_package(builds.package(family), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    if mutant == "rope-dropped-sin":  # with cos 1 as well: no rotation at all
        assert edit_initializers(broken, "cos_cache", np.ones_like)
    assert not _parity(broken, builds.checkpoint(family))


def test_mutant_olmo_hybrid_gated_norm_with_the_model_eps_fails_hf_parity(builds, tmp_path):
    broken = copy_package(builds.package("olmo_hybrid"), tmp_path / "eps")
    path = broken / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    edited = 0
    for node in model.graph.node:
        for attr in node.attribute if node.name.endswith("gated_norm") else ():
            if attr.name == "epsilon":
                attr.f, edited = 1e-6, edited + 1
    onnx.save(model, str(path))
    assert edited == 2  # the two DeltaNet layers
    assert not _parity(broken, builds.checkpoint("olmo_hybrid"))
