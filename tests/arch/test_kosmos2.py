"""Kosmos-2's text decoder (spec kosmos2_text, recipe kosmos2; docs/coverage.md "kosmos-2"): XGLM's layers with a
LayerNorm over the attention output and one over the activated fc1, positions from pad_token_id + 1 that skip pad
tokens as fairseq's make_positions does. Each mechanism's mutant fails the bound the listed-class check passes
(tests/arch/test_wrapped_decoders.py; genai's greedy tokens: the registry row kosmos2_text_only)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from mutants import build_planted
from reference import hf_logits, hf_model, ort_prefill_and_decode
from wrapped_models import save_wrapped

from gqa_export.arch import SPECS
from gqa_export.arch.spec import AbsolutePositions
from gqa_export.pipeline import BuildOptions, build

PROMPT = [0, 17, 45, 300, 99, 200, 301, 3, 7, 11, 12]
PAD = 5  # the tiny config's pad_token_id: its positions' first row is 6
KOSMOS = SPECS["kosmos2_text"]


@pytest.fixture(scope="module")
def kosmos(tmp_path_factory):
    root = tmp_path_factory.mktemp("kosmos2")
    checkpoint = save_wrapped(root / "ckpt", "kosmos-2", "kosmos_2_text_model")
    build(BuildOptions(str(checkpoint), root / "pkg", smoke=False, text_only=True))
    return checkpoint, root / "pkg", hf_model(checkpoint)


def _error(package, model, prompt: list[int]) -> float:
    tokens, got = ort_prefill_and_decode(package, prompt, steps=3)
    return float(np.abs(got - hf_logits(model, tokens, len(prompt))).max())


@pytest.mark.parametrize("prompt", [PROMPT, [0, 17, PAD, 45, 99, PAD, 3, 7]], ids=["plain", "pad_ids_inside"])
def test_kosmos2_matches_its_text_model(kosmos, prompt):
    """The package against the class's text model (what its generate() runs on ids alone), prompt + 3 decode
    steps; a prompt holding the pad id numbers its later tokens one lower and the pad's own row is zero, as HF
    does. Measured 2.0e-6 (plain) and 1.7e-6 (pad ids inside)."""
    _, package, model = kosmos
    assert _error(package, model, prompt) < 1e-4


MUTANTS = {
    # the attention output's LayerNorm (inner_attn_ln) left out
    "no_inner_attn_ln": {"layer": replace(KOSMOS.layer, attention_output_norm=None)},
    # the FFN's LayerNorm over the activated fc1 (ffn_layernorm) left out
    "no_ffn_layernorm": {"layer": replace(KOSMOS.layer, mlp_inner_norm=None)},
    # XGLM's fixed offset 2 instead of pad_token_id + 1 (6 here)
    "fixed_offset": {"positions": AbsolutePositions("embed_positions.weights", offset=2, sinusoidal=True)},
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_kosmos2_mutants_fail_the_bound(tmp_path, monkeypatch, kosmos, mutant):
    checkpoint, _, model = kosmos
    out = build_planted(checkpoint, tmp_path / mutant, monkeypatch, MUTANTS[mutant], "kosmos2_text")
    assert _error(out, model, PROMPT) > 1e-2


def test_positions_that_count_pad_ids_fail_the_bound(tmp_path, monkeypatch, kosmos):
    """Mutant: positions counted from the attention mask (every token, pad ids too: XGLM's rule, right for
    inputs_embeds) are off on a prompt that holds the pad id."""
    from gqa_export.graph import positions

    def counting(monkeypatch):
        def every_token(b, input_ids, attention_mask, pad):
            rows = positions.token_positions(b, input_ids, attention_mask)
            return b.op("Add", rows, b.const(pad + 1, "offset", "int64"))

        monkeypatch.setattr(positions, "pad_skipping_positions", every_token)

    checkpoint, _, model = kosmos
    out = build_planted(checkpoint, tmp_path / "counting", monkeypatch, counting)
    assert _error(out, model, [0, 17, PAD, 45, 99, PAD, 3, 7]) > 1e-2


def test_positions_read_the_text_config_pad_not_generation_config(tmp_path, kosmos):
    """HF's position table counts from the text config's pad_token_id (its modules' padding_idx); a
    generation_config.json naming another pad id (1 here) does not move it (read from there, position 0 sat at
    row 2 instead of 6, and the checkpoint's 1-pad twin was 1.7 off on logits of scale 1.9)."""
    import json
    import shutil

    checkpoint, _, model = kosmos
    edited = shutil.copytree(checkpoint, tmp_path / "ckpt")
    generation = json.loads((edited / "generation_config.json").read_text())
    (edited / "generation_config.json").write_text(json.dumps({**generation, "pad_token_id": 1}))
    build(BuildOptions(str(edited), tmp_path / "pkg", smoke=False, text_only=True))
    assert _error(tmp_path / "pkg", model, [0, 17, PAD, 45, 99, 1, 3, 7]) < 1e-4
