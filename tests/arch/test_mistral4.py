"""Mistral-4 (gqa_export/arch/latent_families.py MISTRAL4, docs/coverage.md "mistral4"): the registry row
(tests/families.py) holds the package to HF; here each mechanism Mistral-4 adds to DeepSeek-V3's graph is planted
wrong (tests/mutants.py build_planted) and must break that parity. The tiny config (tests/derived_moe_models.py)
steps the query scale every 8 positions (llama_4_scaling_beta 0.5), so the 14-token prompt and its 6 decode steps
see the factors 1, 1 + 0.5 log 2 and 1 + 0.5 log 3, and routes the top 2 of 8 experts within the best of 2 groups.

- the query scale skipped (DeepSeek-V3's graph as it is);
- the scale at pos + 1 (Llama-4's temperature counts positions from 1, Mistral-4 from 0: each step a token early);
- the router's groups ranked by their best probability (DeepSeek-V2's) instead of their two best;
- the chosen experts' probabilities not renormalized (norm_topk_prob ignored).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from families import BY_NAME, REGISTERED
from mutants import build_planted
from reference import parity_error

MISTRAL4 = "mistral4"


def _checkpoint(builds):
    if BY_NAME[MISTRAL4] not in REGISTERED:
        pytest.skip("mistral4 needs transformers 5.25")
    return builds.checkpoint(MISTRAL4)


def _from_position_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph import decoder

    original = decoder.position_query_scale
    monkeypatch.setattr(decoder, "position_query_scale", lambda *a, **k: original(*a, **{"offset": 1, **k}))


def _groups_by_best(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph import grouped_routing

    original = grouped_routing._keep_groups
    monkeypatch.setattr(grouped_routing, "_keep_groups", lambda *a, top2: original(*a, top2=False))


def _not_renormalized(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.model import dims

    original = dims.read_moe
    monkeypatch.setattr(dims, "read_moe", lambda *a: replace(original(*a), normalize=False))


MUTANTS = {
    "query-scale-skipped": {"query_position_scale": False},
    "query-scale-from-position-one": _from_position_one,
    "groups-ranked-by-their-best": _groups_by_best,
    "choice-not-renormalized": _not_renormalized,
}


def test_the_correct_mistral4_package_passes(builds):
    checkpoint = _checkpoint(builds)
    assert parity_error(builds.package(MISTRAL4), checkpoint) < 1e-4  # measured 2.1e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_mistral4_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = _checkpoint(builds)
    package = build_planted(checkpoint, tmp_path / "pkg", monkeypatch, MUTANTS[mutant], spec=MISTRAL4)
    assert parity_error(package, checkpoint) > 1e-2  # measured 0.70, 0.33, 1.20, 0.30 (correct: 2.1e-6)
