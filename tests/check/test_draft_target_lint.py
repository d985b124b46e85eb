"""The draft-pairing lint flags a *target* with last-token logits too (issue #36).

tests/check/test_draft_pairing.py plants each pairing break into the draft side only; an independent
mutation check removed the target half of the pruned-logits lint (package/draft.py
`pairing_problems`) and every test still passed. A target whose logits are pruned verifies the
drafted tokens one at a time (docs/speculative.md §4), so `inspect` must report it as an error
finding, once, naming the target; with both graphs pruned, both are reported.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
from typer.testing import CliRunner

from gqa_export.check.report import inspect_package
from gqa_export.cli import app
from gqa_export.package.draft import DRAFT_GRAPH, pairing_problems


def _prune_logits(graph_file: Path) -> None:
    """The graph's logits output declared [B, 1, V], as --prune-lm-head writes it."""
    graph = onnx.load(str(graph_file), load_external_data=False)
    logits = next(o for o in graph.graph.output if o.name == "logits")
    logits.type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(graph, str(graph_file))


def _draft_errors(folder: Path) -> list[dict]:
    findings = inspect_package(folder)["findings"]
    return [f for f in findings if f["id"].startswith("draft-") and f["severity"] == "error"]


def test_a_target_with_pruned_logits_is_a_draft_pairing_error(draft_packages, tmp_path):
    folder = tmp_path / "pruned-target"
    shutil.copytree(draft_packages["paired"], folder)
    assert _draft_errors(folder) == []
    _prune_logits(folder / "model.onnx")
    errors = _draft_errors(folder)
    assert [f["id"] for f in errors] == ["draft-pruned-logits"], errors
    assert "target" in errors[0]["message"] and "last-token logits" in errors[0]["message"]
    assert pairing_problems(folder) == [(errors[0]["id"], errors[0]["message"])]
    shown = CliRunner().invoke(app, ["inspect", str(folder), "--json"])
    assert "draft-pruned-logits" in {f["id"] for f in json.loads(shown.stdout)["findings"]}, shown.output


def test_both_graphs_pruned_are_two_findings(draft_packages, tmp_path):
    folder = tmp_path / "both"
    shutil.copytree(draft_packages["paired"], folder)
    _prune_logits(folder / "model.onnx")
    _prune_logits(folder / DRAFT_GRAPH)
    messages = [f["message"] for f in _draft_errors(folder) if f["id"] == "draft-pruned-logits"]
    assert len(messages) == 2 and sum("target" in m for m in messages) == 1, messages
