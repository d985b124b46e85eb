"""Molmo2's decoder (arch/wrapped_families.MOLMO2_TEXT, docs/coverage.md §27): each choice its config makes
(qk_norm_type, norm_after, rope_scaling_layers, additional_vocab_size) held against Molmo2ForConditionalGeneration
on a prompt holding its additional vocabulary's ids, in the release's layout and transformers 5.x's, with a
planted mutant of each mechanism. The tiny class's choices off their defaults (OLMo's q/k norms, post-norm,
YaRN on layer 1 only) are tests/wrapped_models.py's; test_wrapped_decoders.py holds it on its placeholder ids."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from mutants import build_planted
from reference import hf_logits, hf_model, ort_prefill_and_decode
from wrapped_models import save_wrapped

from gqa_export.arch import SPECS
from gqa_export.arch.spec import ConfigChoice, config_keys
from gqa_export.errors import InputError
from gqa_export.model.spec_choices import chosen_spec
from gqa_export.pipeline import BuildOptions, build

# the image start / patch / end markers and the last additional row (ids 384-399, past the head's 384 rows)
PROMPT = [0, 384, 386, 386, 385, 17, 399, 45, 300, 3, 7, 11]
BOUND = 1e-4  # measured 1.1e-6 to 1.9e-6; every mutant below is >= 1e-2 off or refused
SPEC = SPECS["molmo2_text"]


def _error(package, checkpoint) -> float:
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=3)
    want = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    assert got.shape == want.shape == (len(PROMPT) + 3, 384)  # the head's vocab_size, not the embedding's rows
    return float(np.abs(got - want).max())


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The tiny class in its release's layout (model.transformer.blocks, att_proj, ff_proj, wte's two tables)."""
    return save_wrapped(tmp_path_factory.mktemp("molmo2") / "released", "molmo2", "molmo2_text")


def test_the_default_choices_match_hf(tmp_path):
    """Qwen3's per-head q/k norms, pre-norm layers, YaRN on every layer, in transformers 5.x's layout (the tiny
    class's own choices, OLMo's norms, post-norm, YaRN on layer 1 only, in the release's layout: below)."""
    choices = {"qk_norm_type": "qwen3", "norm_after": False, "rope_scaling_layers": [0, 1]}
    checkpoint = save_wrapped(tmp_path / "ckpt", "molmo2", "molmo2_text", hub_layout=False, **choices)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    assert _error(tmp_path / "pkg", checkpoint) < BOUND


def test_released_layout_matches_hf(tmp_path, released):
    """Also: genai reads logits as wide as the head (vocab_size 384), not the embedding's 400 rows."""
    build(BuildOptions(str(released), tmp_path / "pkg", smoke=False, text_only=True))
    assert _error(tmp_path / "pkg", released) < BOUND
    assert json.loads((tmp_path / "pkg" / "genai_config.json").read_text())["model"]["vocab_size"] == 384


_CHOICES = {c.config_key: c for c in SPEC.config_choices}
MUTANTS = {
    # post-norm layers built pre-norm (norm_after read as False)
    "norm_after_ignored": {"config_choices": (_CHOICES["qk_norm_type"],)},
    # every layer's rope scaled (rope_scaling_layers not read: layer 0 gets YaRN too)
    "scaled_rope_everywhere": {"config_keys": config_keys(scaled_rope_layers="no_such_key")},
    # ff_proj's halves read [gate | up], where its class chunks [up | gate]
    "ff_proj_halves_swapped": {"split_projections": (("mlp.ff_proj", ("mlp.gate_proj", "mlp.up_proj")),)},
    # the additional rows first (wte.new_embedding before wte.embedding)
    "embedding_tables_swapped": {"row_views": tuple(replace(view, rows=view.rows[::-1]) for view in SPEC.row_views)},
}


@pytest.mark.parametrize("plant", list(MUTANTS))
def test_planted_mutants_fail_the_bound(tmp_path, monkeypatch, released, plant):
    out = build_planted(released, tmp_path / plant, monkeypatch, MUTANTS[plant], "molmo2_text")
    assert _error(out, released) > 1e-2


def test_qk_norm_kinds_swapped_do_not_build(tmp_path, monkeypatch, released):
    """Mutant: OLMo's full-width q/k norms read per head (and Qwen3's as full width): the stored weights are
    another width, so no package comes out (the listed-class check would fail)."""
    swapped = ConfigChoice("qk_norm_type", {"qwen3": {"qk_norm": "full"}, "olmo": {"qk_norm": "head"}})
    plant = {"config_choices": (swapped, _CHOICES["norm_after"])}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's or the builder's shape error
        out = build_planted(released, tmp_path / "swapped", monkeypatch, plant, "molmo2_text")
        _error(out, released)


def test_additional_rows_not_read_is_refused(tmp_path, monkeypatch, released):
    """Mutant: additional_vocab_size not read: the embedding's 400 rows are not the config's vocab_size 384."""
    plant = {"config_keys": config_keys(extra_vocab_rows="no_such_key")}
    with pytest.raises(InputError, match=r"vocab_size gives 384 but .*embed_tokens\.weight is \[400, 64\]"):
        build_planted(released, tmp_path / "rows", monkeypatch, plant, "molmo2_text")


def test_a_choice_the_spec_does_not_build_is_refused_in_one_line():
    config = SimpleNamespace(qk_norm_type="layer", norm_after=False)
    with pytest.raises(InputError) as refused:
        chosen_spec(SPEC, config)
    said = "qk_norm_type='layer' is not one the molmo2_text spec builds (it builds 'qwen3', 'olmo')"
    assert str(refused.value) == said


def test_a_checkpoint_without_its_head_is_refused(tmp_path, released):
    """Molmo2's class never ties its lm_head to the embedding (vocab_size rows against 400): a checkpoint without
    lm_head.weight is refused in one line, not scored by the embedding's rows."""
    import shutil

    from safetensors.numpy import load_file, save_file

    checkpoint = tmp_path / "headless"
    shutil.copytree(released, checkpoint)
    tensors = load_file(checkpoint / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if k != "lm_head.weight"}, checkpoint / "model.safetensors")
    with pytest.raises(InputError, match=r"no lm_head\.weight for the 384 logits, and the embedding's 400 rows"):
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
