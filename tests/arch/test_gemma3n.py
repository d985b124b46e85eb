"""Gemma-3n's own checks (the common ones, a right-padded batch in every mode included, are its
registry rows, tests/families.py): hard-token ids and the per-layer table's range in the
conditional form, and mutants of each mechanism it adds (alternating updates' correction, LAuReL,
the gaussian top-k cutoff, the hard-token embedders, the AltUp magnitude renormalisation), each of
which must fail parity (docs/gemma3n.md)."""

from __future__ import annotations

import json
import shutil
from functools import partial

import pytest
from reference import parity_error

from gqa_export.graph import alternating_updates, decoder, decoder_layer, input_embedding
from gqa_export.pipeline import BuildOptions, build

# vision (352..367) and audio (368..383) control ids of the conditional form, past the per-layer
# table's 352 rows: embedded by their own embedders, per-layer row 0
HARD_TOKEN_PROMPT = (0, 360, 17, 375, 354, 4, 45, 383, 99, 352, 7)


def test_hard_token_ids_match_hf(builds):
    assert parity_error(builds.package("gemma3n_conditional"), builds.checkpoint("gemma3n_conditional"),
                        HARD_TOKEN_PROMPT) < 1e-4  # fmt: skip


def _mutant_error(builds, tmp_path, name: str = "gemma3n_causal", prompt: tuple[int, ...] | None = None) -> float:
    build(BuildOptions(str(builds.checkpoint(name)), tmp_path / "pkg", smoke=False, text_only=True))
    return parity_error(tmp_path / "pkg", builds.checkpoint(name), prompt)


def test_mutant_without_altup_correction_fails_parity(builds, tmp_path, monkeypatch):
    monkeypatch.setattr(decoder, "alternating_layer", partial(alternating_updates.alternating_layer, correct=False))
    assert _mutant_error(builds, tmp_path) > 1e-2


def test_mutant_without_laurel_fails_parity(builds, tmp_path, monkeypatch):
    monkeypatch.setattr(decoder_layer, "augmented_residual", lambda lc, h, x: h)
    assert _mutant_error(builds, tmp_path) > 1e-2


def test_mutant_without_altup_renormalisation_fails_parity(builds, tmp_path, monkeypatch):
    monkeypatch.setattr(alternating_updates, "_rescaled", lambda b, x, target, dtype: b.op(
        "Unsqueeze", x, b.const([2], "stream_axis", "int64")))  # fmt: skip
    assert _mutant_error(builds, tmp_path) > 1e-2


def test_mutant_without_sparsity_cutoff_fails_parity(builds, tmp_path):
    """activation_sparsity_pattern zeroed in the config: the gates of layers 0, 2, 5 stay dense."""
    checkpoint = shutil.copytree(builds.checkpoint("gemma3n_causal"), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    config["activation_sparsity_pattern"] = [0.0] * config["num_hidden_layers"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", builds.checkpoint("gemma3n_causal")) > 1e-2


def test_mutant_without_hard_token_embedders_fails_parity(builds, tmp_path, monkeypatch):
    monkeypatch.setattr(input_embedding, "embed_hard_tokens", lambda b, ids, h, *args: h)
    assert _mutant_error(builds, tmp_path, "gemma3n_conditional", HARD_TOKEN_PROMPT) > 1e-2


def test_per_layer_widths_are_checked_as_sizes():
    from gqa_export.errors import InputError
    from gqa_export.model.raw_config import check_raw_config

    sizes = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=384)
    check_raw_config({**sizes, "intermediate_size": [96, 128]})
    for bad in ([96, 0], ["96", 128]):
        with pytest.raises(InputError, match="intermediate_size"):
            check_raw_config({**sizes, "intermediate_size": bad})


def test_active_stream_outside_the_streams_is_refused_in_one_line(builds, tmp_path):
    from gqa_export.errors import InputError

    checkpoint = shutil.copytree(builds.checkpoint("gemma3n_causal"), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "altup_active_idx": 3}))
    with pytest.raises(InputError, match="altup_active_idx") as refused:
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert "\n" not in str(refused.value)


def test_the_conditional_form_needs_text_only(builds, tmp_path):
    """Gemma3nForConditionalGeneration's towers are not built (onnxruntime-genai runs no gemma3n multimodal
    package): without --text-only the build is refused in one line naming them and the flag, nothing written
    (once it exported the decoder with only a note); with it, no "has no effect" note. The causal form, which
    has no towers, needs no flag."""
    from gqa_export.errors import InputError

    with pytest.raises(InputError) as refused:
        build(BuildOptions(str(builds.checkpoint("gemma3n_conditional")), tmp_path / "c", smoke=False))
    said = str(refused.value)
    assert said.startswith("Gemma3nForConditionalGeneration's vision and audio towers are not built"), said
    assert "pass --text-only to export its gemma3n text decoder alone" in said and "\n" not in said
    assert not (tmp_path / "c").exists()
    causal = build(BuildOptions(str(builds.checkpoint("gemma3n_causal")), tmp_path / "t", smoke=False)).notes
    assert not any("towers" in n or "text-only" in n for n in causal), causal
    quiet = build(
        BuildOptions(str(builds.checkpoint("gemma3n_conditional")), tmp_path / "q", smoke=False, text_only=True)
    )
    assert not any("text-only" in n for n in quiet.notes), quiet.notes
