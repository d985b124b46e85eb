"""Step3p7's text decoder (gqa_export/arch/wrapped_families.STEP3P5, docs/coverage.md §32), what only it combines (the
checks every family gets are its row `step3p7_text_only` in tests/families.py; the release's names: the class's case
in tests/arch/test_wrapped_decoders.py): a mutant of each mechanism it takes into Laguna's layers, planted into the
spec the registry's package is built from, must move the prompt logits far past the registry's bound (1e-4) against
HF's on the same checkpoint; without --text-only, one line naming the vision tower."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from families import BY_NAME, require_registered
from mutants import build_planted
from reference import prompt_error
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.arch.spec import config_keys
from gqa_export.cli import app

ROW = "step3p7_text_only"
SPEC = "step3p5"
BOUND = 1e-2  # every mutant must be off by more; measured in docs/coverage.md §32


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(ROW)


def _prompt_error(builds: Any, package: Any) -> float:
    """vs HF's logits on the row's prompt (placeholder ids 300 / 301 in it), one forward shared by every mutant."""
    return prompt_error(package, builds.checkpoint(ROW), BY_NAME[ROW].prompt)


_S = SPECS[SPEC]
assert _S.moe is not None
_KEYS = dict(_S.config_keys)
# mutant -> fields of the ArchSpec it replaces
MUTANTS: dict[str, dict[str, Any]] = {
    "plain-norms": dict(norm_offset=0.0),  # w where every RMSNorm (q/k and final too) is 1 + w
    "softplus-gate": dict(output_gate_activation="softplus"),  # Laguna's gate
    "dense-mlp-unclipped": dict(moe=replace(_S.moe, dense_limited=False)),  # Ling 3's dense MLPs
    "limits-unread": dict(moe=replace(_S.moe, activation="swiglu")),  # no SwiGLU clipped anywhere
    "routed-scaling-unread": dict(config_keys=config_keys(**{**_KEYS, "routed_scaling": "routed_scaling_factor"})),
}


def test_the_correct_package_passes(builds):
    assert _prompt_error(builds, builds.package(ROW)) < 1e-4


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    out = build_planted(builds.checkpoint(ROW), tmp_path / mutant, monkeypatch, MUTANTS[mutant], SPEC)
    error = _prompt_error(builds, out)
    print(f"{mutant}: {error:.3g}")
    assert error > BOUND, (mutant, error)


def test_sliding_heads_unread_builds_no_package(builds, tmp_path, monkeypatch):
    """Mutant: the sliding layer read with the full layer's 4 query heads (its per_layer_config view unread): its
    q_proj (6 heads) refuses it before any graph."""
    from gqa_export.errors import InputError
    from gqa_export.model import layer_dims

    def unread(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(layer_dims, "view_heads", lambda config, i, heads: 0)

    with pytest.raises(InputError, match="q_proj"):
        build_planted(builds.checkpoint(ROW), tmp_path / "heads", monkeypatch, unread, SPEC)


def test_release_layout_gate_and_up_joined_in_order(tmp_path, monkeypatch):
    """The release's names (moe.gate_proj / moe.up_proj stacked [E, I, H], read joined as mlp.experts.gate_up_proj:
    ArchSpec.row_views; its correct package is the class's case in test_wrapped_decoders.py). Mutant: the parts
    joined up first, gate second: the routed experts' halves swapped fail the bound."""
    from wrapped_models import save_wrapped

    checkpoint = save_wrapped(tmp_path / "release", "step3p7", "step3p5")
    swapped = tuple(replace(view, rows=view.rows[::-1]) for view in _S.row_views)
    out = build_planted(checkpoint, tmp_path / "swapped", monkeypatch, dict(row_views=swapped), SPEC)
    error = prompt_error(out, checkpoint, BY_NAME[ROW].prompt)
    print(f"gate-up-joined-swapped: {error:.3g}")
    assert error > BOUND


def test_without_text_only_names_its_vision_tower(builds, tmp_path):
    """Without --text-only: one line, exit 2, naming the vision tower and projector."""
    result = CliRunner().invoke(app, ["build", str(builds.checkpoint(ROW)), "-o", str(tmp_path / "out"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "Step3p7ForConditionalGeneration's vision tower and projector are not built" in said
    assert "pass --text-only to export its step3p5 text decoder alone" in said
    assert not (tmp_path / "out").exists()
