"""runtime/decode.py: a `--prune-lm-head` package scores every position in one pass through its
full-logits view, equal to the full-logits package and to stepping token by token; `eval` and
`--report` read the same logits from either form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mutants import copy_package

from gqa_export.graph.io_options import IoOptions
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.decode import PositionLogits, full_logits_view, position_logits
from gqa_export.runtime.evaluate import evaluate, read_text
from gqa_export.runtime.logit_error import PROMPT_LENGTH, PROMPTS, logit_error
from gqa_export.runtime.run import load

DATA = Path(__file__).parent.parent / "data"
TRAINED = DATA / "tiny-trained"
EVAL_TEXT = DATA / "tiny-text" / "eval.txt"
IDS = np.array([1, 57, 300, 12, 9, 410, 33, 7, 8, 250, 61, 2, 90, 14, 5, 77], dtype=np.int64)


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    """The trained tiny Llama in both logits forms, GQA and standard Attention (bias), fp32 and int4."""
    root = tmp_path_factory.mktemp("decode")
    forms = {
        "full": {},
        "pruned": {"io": IoOptions(prune_lm_head=True)},
        "bias-full": {"attention": "bias"},
        "bias-pruned": {"attention": "bias", "io": IoOptions(prune_lm_head=True)},
        "int4-full": {"precision": "int4"},
        "int4-pruned": {"precision": "int4", "io": IoOptions(prune_lm_head=True)},
    }
    for name, options in forms.items():
        build(BuildOptions(str(TRAINED), root / name, smoke=False, **options))
    return {name: root / name for name in forms}


@pytest.mark.parametrize(("full", "pruned"), [("full", "pruned"), ("bias-full", "bias-pruned")])
def test_pruned_package_scores_every_position_in_one_pass(packages, full, pruned):
    assert full_logits_view(packages[pruned]) and full_logits_view(packages[full]) == {}  # pruned: a view is needed
    view = position_logits(packages[pruned], "cpu")
    assert not view.stepwise  # the view was recognized: one pass per window
    expected = position_logits(packages[full], "cpu").at_positions(IDS, 0)
    np.testing.assert_allclose(view.at_positions(IDS, 0), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(view(IDS, 5), expected[4:-1], atol=1e-5, rtol=0)
    stepped = PositionLogits(load(packages[pruned], "cpu"), stepwise=True)
    np.testing.assert_allclose(stepped.at_positions(IDS, 3), expected[3:], atol=1e-4, rtol=0)


def test_the_view_changes_nothing_on_disk(packages):
    before = {p.name: p.stat().st_mtime_ns for p in packages["pruned"].iterdir()}
    assert set(full_logits_view(packages["pruned"])) == {"model.onnx"}
    assert full_logits_view(packages["full"]) == {}
    assert {p.name: p.stat().st_mtime_ns for p in packages["pruned"].iterdir()} == before


def test_an_unrecognized_pruned_graph_falls_back_to_stepping(packages, tmp_path):
    """Another exporter's pruned form (no last_token gather): stepped, still every position."""
    import onnx

    other = copy_package(packages["pruned"], tmp_path / "other")
    model = onnx.load(str(other / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        node.name = node.name.replace("/last_token/", "/pick_last/")
    onnx.save(model, str(other / "model.onnx"))
    assert full_logits_view(other) is None
    logits = position_logits(other, "cpu")
    assert logits.stepwise
    expected = position_logits(packages["full"], "cpu").at_positions(IDS, 0)
    np.testing.assert_allclose(logits.at_positions(IDS, 0), expected, atol=1e-4, rtol=0)


def test_eval_of_a_pruned_package_equals_the_full_one(packages):
    text = read_text(EVAL_TEXT)
    full = evaluate(packages["full"], text, window=128, max_tokens=600)
    pruned = evaluate(packages["pruned"], text, window=128, max_tokens=600)
    assert pruned["scored"] == full["scored"] > 500
    assert pruned["perplexity"] == pytest.approx(full["perplexity"], rel=1e-6)


def test_report_scores_every_position_of_pruned_packages(packages):
    vocab = json.loads((packages["full"] / "genai_config.json").read_text())["model"]["vocab_size"]
    full = logit_error(packages["full"], packages["int4-full"], vocab)
    pruned = logit_error(packages["pruned"], packages["int4-pruned"], vocab)
    assert pruned["positions"] == full["positions"] == PROMPTS * PROMPT_LENGTH
    assert pruned["relative_l2"] == pytest.approx(full["relative_l2"], rel=1e-4)
    assert 0 < full["relative_l2"] < 0.5  # int4 differs from float, and not wildly
    same = logit_error(packages["full"], packages["pruned"], vocab)
    assert same["relative_l2"] < 1e-5 and same["next_token_agreement"] == 1.0
