"""`eval`'s comparison with a reference, recomputed from its definition (issue #36).

No test read `delta.accuracy_delta`, so an independent mutation check flipped its sign unseen. It is
the package's next-token accuracy minus the reference's (negative when the package predicts worse),
the perplexity increase is (package / reference - 1) in percent, and top-1 agreement the share of
positions where both predict the same token: checked on known scores, through `evaluate` (the report's
own fields must agree with each other) and as the CLI prints them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.runtime import evaluate as module
from gqa_export.runtime.evaluate import Scores, compare

TEXT = Path(__file__).resolve().parents[1] / "data" / "tiny-text" / "eval.txt"


def _scores(source: str, nll: list[float], top1: list[int], targets: list[int]) -> Scores:
    return Scores(source, "package", "cpu", np.array(nll, np.float64), np.array(top1), np.array(targets))


TARGETS = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
# the package predicts 6 of 10 targets, the reference 8; they agree on positions 0-5 and 8-9
PACKAGE = _scores("pkg", [1.0] * 10, [5, 6, 7, 8, 9, 10, 0, 0, 1, 1], TARGETS)
REFERENCE = _scores("ref", [0.5] * 10, [5, 6, 7, 8, 9, 10, 11, 12, 1, 1], TARGETS)


def test_known_answer():
    delta = compare(PACKAGE, REFERENCE)
    assert PACKAGE.accuracy == pytest.approx(0.6) and REFERENCE.accuracy == pytest.approx(0.8)
    assert delta["accuracy_delta"] == pytest.approx(-0.2)  # worse than the reference: negative
    assert delta["perplexity_increase_pct"] == pytest.approx((math.exp(1.0) / math.exp(0.5) - 1) * 100)
    assert delta["top1_agreement"] == pytest.approx(0.8)
    swapped = compare(REFERENCE, PACKAGE)
    assert swapped["accuracy_delta"] == pytest.approx(0.2) and swapped["perplexity_increase_pct"] < 0


def test_eval_reports_the_delta_of_its_own_numbers(trained_kv, monkeypatch):
    """`evaluate` and the CLI on a real package, with the scoring replaced by the known scores (the
    package scored first, then the reference): the report's delta is accuracy - reference accuracy,
    and the text prints it signed."""
    package = trained_kv(None)
    scored = {str(package): PACKAGE, str(package.parent): REFERENCE}
    monkeypatch.setattr(module, "score", lambda source, *args, **kwargs: scored[str(source)])
    report = module.evaluate(package, TEXT.read_text()[:400], reference=package.parent, window=64)
    delta = report["delta"]
    assert report["accuracy"] == pytest.approx(0.6) and report["reference"]["accuracy"] == pytest.approx(0.8)
    assert delta["accuracy_delta"] == pytest.approx(report["accuracy"] - report["reference"]["accuracy"])
    assert delta["perplexity_increase_pct"] == pytest.approx(
        (report["perplexity"] / report["reference"]["perplexity"] - 1) * 100
    )
    args = ["eval", str(package), "--text", str(TEXT), "--reference", str(package.parent), "--max-tokens", "40"]
    shown = CliRunner().invoke(app, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["delta"]["accuracy_delta"] == pytest.approx(-0.2)
    text = CliRunner().invoke(app, args, terminal_width=200)
    row = next(line for line in text.stdout.splitlines() if line.startswith("accuracy delta"))
    assert row.split()[-1] == "-20.00%", row
