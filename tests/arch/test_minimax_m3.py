"""MiniMax-M3's block-sparse layers (docs/moe.md): what its registry row (tests/families.py: logits,
greedy tokens, a ragged batch, int4/int8) does not show.

The package is plain attention with the block-sparse indexer left out, exact while a query's keys fit in
the index_topk_blocks blocks of index_block_size the indexer keeps (it then keeps them all). These checks:
the package's context is capped there (genai_config's context_length and search.max_length), a longer
--max-length is refused in one line (exit 2, nothing written), and HF itself past the cap is not plain
attention (so the cap is needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from families import PROMPT, require_registered
from typer.testing import CliRunner

from gqa_export.cli import app

FAMILY = "minimax_m3_vl_text"
CAP = 128  # the tiny config's 16 blocks of 8 keys (tests/derived_moe_models.py), below max_position_embeddings 256


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


def _context(package: Path) -> tuple[int, int]:
    config = json.loads((package / "genai_config.json").read_text())
    return config["model"]["context_length"], config["search"]["max_length"]


def test_package_context_is_capped_at_the_kept_blocks(builds):
    assert _context(builds.package(FAMILY)) == (CAP, CAP)


def test_max_length_past_the_kept_blocks_is_refused_in_one_line(builds, tmp_path):
    out = tmp_path / "pkg"
    args = ["build", str(builds.checkpoint(FAMILY)), "-o", str(out), "--no-smoke", "--max-length", str(CAP + 1)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "--max-length" in line]
    assert len(lines) == 1 and f"index_block_size {CAP}" in lines[0] and "Traceback" not in result.output
    assert not out.exists()


def test_hf_past_the_kept_blocks_is_not_plain_attention(builds):
    """HF itself keeping 2 blocks of 8 keys (the query's own among them) on a 30-token prompt: the first 16
    positions (at most 2 blocks) are those of 16 blocks, later ones differ by far more than any parity bound, so past
    the cap the package (plain attention) would be wrong."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(builds.checkpoint(FAMILY), dtype=torch.float32).eval()
    ids = torch.tensor([(list(PROMPT) * 3)[:30]])
    with torch.no_grad():
        dense = model(ids).logits[0].numpy()
        model.model.layers[1].self_attn.indexer.topk_blocks = 2
        sparse = model(ids).logits[0].numpy()
    within, past = np.abs(dense - sparse)[:16].max(), np.abs(dense - sparse)[16:].max()
    assert within < 1e-5 and past > 0.1, (within, past)  # measured 0.0 and 8.5 (logits reach 11.8)
