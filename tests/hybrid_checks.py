"""Checks the hybrid decoders' own test modules share (tests/arch/test_hybrid*.py,
tests/arch/test_nemotron_h.py, and the state-space modules): a config variant against HF, a copy of a session
package or checkpoint to plant a mutant in without touching the shared build, and a config the build must refuse
in one line."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mutants import edited_checkpoint
from reference import genai_prompt_then_greedy, hf_generate, hf_model, parity_error


def copy_tree(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


def refused_build_errors(checkpoint: Path, tmp_path: Path, edit: dict[str, Any]) -> list[str]:
    """A copy of `checkpoint` with `edit` merged into its config.json, built through the CLI: the build must
    exit 2 and write nothing; returns its `error:` lines for the caller's own check of the wording."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    copy = edited_checkpoint(checkpoint, tmp_path / "ckpt", **edit)
    result = CliRunner().invoke(app, ["build", str(copy), "-o", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "p").exists()
    return [x for x in result.output.splitlines() if x.startswith("error:")]


def assert_variant_matches_hf(package: Path, checkpoint: Path) -> None:
    """A config variant's checks: prompt and decode-step logits within 1e-4 of HF, and 20 greedy
    onnxruntime-genai tokens on a 7-token prompt equal to HF generate, not one repeated id."""
    assert parity_error(package, checkpoint) < 1e-4
    prompt = [0, 17, 45, 99, 200, 3, 7]
    _, tokens = genai_prompt_then_greedy(package, prompt, 20)
    assert tokens == hf_generate(hf_model(checkpoint), prompt, 20) and len(set(tokens)) >= 4
