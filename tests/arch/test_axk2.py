"""Mutants of A.X-K2's mechanisms (gqa_export/arch/latent_families.AXK2, docs/coverage.md): each planted into
the spec or the graph builder the registry's package is built from (tests/families.py row `axk2`), or into a
copy of that package, must move the logits far past the registry's bound (1e-4; the package: ~3e-6).

The value gate: q_b's per-head gate half dropped (the attention output ungated), or its sigmoid taken as a
softplus. The query latent q_b reads: [q_a_layernorm(q_a) | q_a] read as [q_a | q_a_layernorm(q_a)] (halves
exchanged) or as the normed half twice (the raw half lost). The GatedRMSNorm: its gate dropped (the RMSNorm
alone), or its gate MLP without the SiLU. The router with n_group null: its selection bias zeroed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from families import require_registered
from mutants import build_planted, copy_package, edit_initializers, times
from reference import parity_error

from gqa_export.arch import SPECS
from gqa_export.graph import decoder_layer, gated_norm, latent_attention
from gqa_export.graph.blocks import normalize

ROW = "axk2"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _latent_names(**change: Any) -> dict[str, Any]:
    spec = SPECS[ROW]
    assert spec.latent_attention is not None
    return dict(latent_attention=replace(spec.latent_attention, **change))


def _gate_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """q_b's gate half split off and never applied."""
    split = latent_attention._value_gate_split

    def ungated(lc: Any, q: Any) -> Any:
        query = split(lc, q)
        lc.output_gate.pop("value_gate")
        return query

    monkeypatch.setattr(latent_attention, "_value_gate_split", ungated)


def _norm_gate_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GatedRMSNorm read as its inner RMSNorm alone."""

    def plain(lc: Any, x: Any, module: str, name: str) -> Any:
        inner = f"{module}.{lc.spec.layer.gated_norms[0]}"
        return normalize(lc.b, x, lc.name(inner), lc.params, lc.dims, name, lc.dims.hidden_size)

    monkeypatch.setattr(decoder_layer, "gated_norm", plain)


def _norm_silu_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gated_norm, "silu", lambda b, x, name: x)


# mutant -> a spec change (fields of ArchSpec) or a graph-builder patch
MUTANTS: dict[str, dict[str, Any] | Callable[[pytest.MonkeyPatch], None]] = {
    "value-gate-dropped": _gate_dropped,
    "value-gate-softplus": dict(output_gate_activation="softplus"),
    "q-latent-halves-exchanged": _latent_names(q_b_input=("raw", "normed")),
    "q-latent-raw-half-lost": _latent_names(q_b_input=("normed", "normed")),
    "gated-norm-gate-dropped": _norm_gate_dropped,
    "gated-norm-silu-dropped": _norm_silu_dropped,
}


def test_the_correct_package_passes(builds):
    assert parity_error(builds.package(ROW), builds.checkpoint(ROW)) < 1e-4  # measured 2.6e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = builds.checkpoint(ROW)
    error = parity_error(build_planted(checkpoint, tmp_path / mutant, monkeypatch, MUTANTS[mutant], ROW), checkpoint)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def test_mutant_selection_bias_zeroed_fails_hf_parity(builds, tmp_path):
    """Routing without groups (n_group null) still chooses on sigmoid + e_score_correction_bias."""
    broken = copy_package(builds.package(ROW), tmp_path / "pkg")
    assert edit_initializers(broken, "*.mlp.gate.e_score_correction_bias", times(0.0))
    error = parity_error(broken, builds.checkpoint(ROW))
    print(f"selection-bias-zeroed: {error:.3g}")
    assert error > BOUND, error
