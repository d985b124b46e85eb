"""DeepSeek-V3.2's sparse attention (docs/latent-attention.md): what its registry row
(tests/families.py: every mode, the latent cache, ragged batches, int4/int8, fp16) does not show.

The package is DeepSeek-V3's latent attention with the lightning indexer left out, exact while every
query sees at most index_topk keys (the indexer then keeps them all). These checks: the package's
context is capped at index_topk (genai_config's context_length and search.max_length, a note in the
build output), a longer --max-length is refused in one line (exit 2, nothing written), HF past
index_topk indeed differs from plain MLA (so the cap is needed; both for GLM-MoE-DSA too), and the
mutants: the cap dropped, and a config.json's rope_interleave read (the class always rotates pairs)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from families import PROMPT, require_registered
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

FAMILY = "deepseek_v32"
# the families under the same policy: GLM-MoE-DSA's indexers too keep every key within index_topk (its
# "shared" layers reuse the previous full layer's choice), so its package is capped the same way; so do A.X-K2's
CAPPED = (FAMILY, "glm_moe_dsa", "axk2", "hy_v4")
INDEX_TOPK = 128  # the tiny config's (tests/derived_moe_models.py), below max_position_embeddings 256


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


def _context(package: Path) -> tuple[int, int]:
    """(model.context_length, search.max_length) of a package's genai_config."""
    config = json.loads((package / "genai_config.json").read_text())
    return config["model"]["context_length"], config["search"]["max_length"]


@pytest.mark.parametrize("family", CAPPED)
def test_package_context_is_capped_at_index_topk(builds, tmp_path, family):
    """The registry's package and a CLI build: context_length and max_length are index_topk, not the
    model's 256, and the build says so in one line."""
    require_registered(family)
    assert _context(builds.package(family)) == (INDEX_TOPK, INDEX_TOPK)
    out = tmp_path / "pkg"
    result = CliRunner().invoke(app, ["build", str(builds.checkpoint(family)), "-o", str(out), "--no-smoke"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "index_topk" in line]
    assert len(lines) == 1 and f"index_topk {INDEX_TOPK}" in lines[0], result.output
    assert _context(out) == (INDEX_TOPK, INDEX_TOPK)


def test_max_length_past_index_topk_is_refused_in_one_line(builds, tmp_path):
    out = tmp_path / "pkg"
    args = ["build", str(builds.checkpoint(FAMILY)), "-o", str(out), "--no-smoke", "--max-length", "129"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "--max-length" in line]
    assert len(lines) == 1 and "index_topk 128" in lines[0] and "Traceback" not in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("family", CAPPED)
def test_hf_past_index_topk_is_not_plain_mla(builds, family):
    """HF itself with index_topk 4 on the 14-token prompt: the first 4 positions (at most 4 keys each)
    are those of index_topk 128, later ones differ by far more than any parity bound here, so past
    index_topk the package (plain MLA) would be wrong: hence the cap. (GLM-MoE-DSA's "shared" layer
    has no indexer of its own: it reuses layer 0's choice; A.X-K2's indexer reads the normed query latent.)"""
    import torch
    from transformers import AutoModelForCausalLM

    require_registered(family)
    model = AutoModelForCausalLM.from_pretrained(builds.checkpoint(family), dtype=torch.float32).eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        dense = model(ids).logits[0].numpy()
        for layer in model.model.layers:
            if layer.self_attn.indexer is not None:
                layer.self_attn.indexer.index_topk = 4
        sparse = model(ids).logits[0].numpy()
    within, past = np.abs(dense - sparse)[:4].max(), np.abs(dense - sparse)[4:].max()
    # measured 4.8e-7 and 4.3 (glm_moe_dsa: 0 and 3.7, axk2: 8.3e-7 and 3.6)
    assert within < 1e-5 and past > 0.1, (within, past)


def test_mutant_cap_dropped_is_caught(builds, tmp_path, monkeypatch):
    """The cap not applied (the model's context, 256, as every other family): the package would run
    past index_topk; the context check above refuses it."""
    from gqa_export.model.dims import ModelDims

    monkeypatch.setattr(ModelDims, "context_length", property(lambda dims: dims.max_position_embeddings))
    build(BuildOptions(str(builds.checkpoint(FAMILY)), tmp_path / "pkg", smoke=False))
    assert _context(tmp_path / "pkg") == (256, 256) != (INDEX_TOPK, INDEX_TOPK)


def _with_rope_interleave_false(checkpoint: Path, to: Path) -> Path:
    shutil.copytree(checkpoint, to)
    config = json.loads((to / "config.json").read_text())
    (to / "config.json").write_text(json.dumps({**config, "rope_interleave": False}, indent=2))
    return to


def test_rope_interleave_in_config_is_ignored(builds, tmp_path):
    """DeepseekV32Attention always rotates the rope dims in pairs (its config class has no
    rope_interleave): a config.json carrying rope_interleave false exports as HF runs it."""
    checkpoint = _with_rope_interleave_false(builds.checkpoint(FAMILY), tmp_path / "ckpt")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) < 1e-4


def test_mutant_rope_interleave_read_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The spec reading rope_interleave as DeepSeek-V3's does (its ignore and the class filter both lifted): halves
    rotated where HF rotates pairs."""
    from mutants import read_for_every_class

    from gqa_export.arch import SPECS

    monkeypatch.setitem(SPECS, FAMILY, replace(SPECS[FAMILY], ignore=()))
    read_for_every_class(monkeypatch, "rope_interleave")
    checkpoint = _with_rope_interleave_false(builds.checkpoint(FAMILY), tmp_path / "ckpt")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) > 1e-2
