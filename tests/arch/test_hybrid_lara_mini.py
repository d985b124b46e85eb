"""Lara-Mini's gated DeltaNet, what only it has (the checks every family gets are its row in
tests/families.py): the hub's one stacked in_proj (rows q | k | v | z | b | a) read by row ranges,
transformers 5.x's own layout (the four projections apart, the gated norm as linear_attn.norm), and
mutants of the row ranges and of its NoPE full layers (docs/coverage.md §9)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from reference import parity_error

from gqa_export import arch
from gqa_export.graph.gated_deltanet import stacked_rows
from gqa_export.pipeline import BuildOptions, build

# Lara-Mini (tests/dense_models.py lara_mini): DeltaNet at 0, 2 (Hk 2, Hv 4, dk 16, dv 32: in_proj rows
# 64 + 128 | 128 | 4 | 4), sliding GQA with RoPE at 1, full GQA without at 3, experts on every layer
LARA = "lara_mini"


def test_lara_mini_in_transformers_own_layout_matches_hf(tmp_path):
    """save_pretrained(save_original_format=False): in_proj_qkv / z / b / a and linear_attn.norm."""
    from dense_models import build_model
    from tiny_models import save_tokenizer

    checkpoint = tmp_path / "ckpt"
    build_model(LARA).save_pretrained(checkpoint, save_original_format=False)
    save_tokenizer(checkpoint, vocab_size=384)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert parity_error(package, checkpoint) < 1e-4


def _b_a_swapped(d, part):
    return stacked_rows(d, {"b": "a", "a": "b"}.get(part, part))


def test_lara_mini_mutant_stacked_rows_fail_parity(builds, tmp_path, monkeypatch):
    """beta's and the decay's rows of the stacked in_proj exchanged."""
    from gqa_export.graph import gated_deltanet

    monkeypatch.setattr(gated_deltanet, "stacked_rows", _b_a_swapped)
    package = tmp_path / "pkg"
    build(BuildOptions(str(builds.checkpoint(LARA)), package, smoke=False))
    assert parity_error(package, builds.checkpoint(LARA)) > 1e-2


@pytest.mark.parametrize("change", [dict(rope_layers="all"), dict(norm_offset=1.0)], ids=["full-rope", "1+w-norms"])
def test_lara_mini_spec_mutant_fails_parity(builds, tmp_path, monkeypatch, change):
    """A spec with RoPE on the full layers too, or Qwen3.5's (1 + w) RMSNorms."""
    monkeypatch.setitem(arch.SPECS, LARA, replace(arch.SPECS[LARA], **change))
    package = tmp_path / "pkg"
    build(BuildOptions(str(builds.checkpoint(LARA)), package, smoke=False))
    assert parity_error(package, builds.checkpoint(LARA)) > 1e-2


def test_lara_mini_ignores_a_partial_rotary_factor_its_class_ignores(builds, tmp_path):
    """A config carrying Qwen3.5's partial_rotary_factor (0.25): LaraMini's default rope rotates the
    whole head whatever it says, and so does the package (ArchSpec.default_rope_whole_head)."""
    import json
    import shutil

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(builds.checkpoint(LARA), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["partial_rotary_factor"] = 0.25
    config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 0.25}
    (checkpoint / "config.json").write_text(json.dumps(config))
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert parity_error(package, checkpoint) < 1e-4
