"""Mutants of the mechanisms the issue #39 families brought (gqa_export/arch/derived_families.py):
each planted into a copy of the correct registry package (tests/mutants.py) must break HF parity,
the registry's check (tests/test_families.py), so a graph that dropped the mechanism fails it.

NanoChat: the RoPE rotating by minus the angle (its sin table negated: un-negated, the rotation
goes the usual way), the weightless RMSNorm of the embeddings (a weight of 2 on it), the scaleless
q/k norms after RoPE (a weight of 2: scores x4), and the final logit softcap (its cap doubled)."""

from __future__ import annotations

import numpy as np
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode

MUTANTS = {
    "rope-not-reversed": ("sin_cache", times(-1.0)),
    "embedding-norm-weighted": ("const.embedding_norm_ones", times(2.0)),
    "qk-norms-weighted": ("const.[qk]_norm_unit_weight*", times(2.0)),
    "softcap-doubled": ("const.final_softcap", times(2.0)),
}


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


def test_the_correct_nanochat_package_passes(builds):
    assert _parity(builds.package("nanochat"), builds.checkpoint("nanochat"))


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_nanochat_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = MUTANTS[mutant]
    broken = copy_package(builds.package("nanochat"), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert not _parity(broken, builds.checkpoint("nanochat"))
