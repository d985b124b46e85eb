"""Checks the hybrid decoders' own test modules share (tests/arch/test_hybrid*.py,
tests/arch/test_nemotron_h.py): a config variant against HF, and a copy of a session package or
checkpoint to plant a mutant in without touching the shared build."""

from __future__ import annotations

import shutil
from pathlib import Path

from reference import genai_prompt_then_greedy, hf_generate, hf_model, parity_error


def copy_tree(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


def assert_variant_matches_hf(package: Path, checkpoint: Path) -> None:
    """A config variant's checks: prompt and decode-step logits within 1e-4 of HF, and 20 greedy
    onnxruntime-genai tokens on a 7-token prompt equal to HF generate, not one repeated id."""
    assert parity_error(package, checkpoint) < 1e-4
    prompt = [0, 17, 45, 99, 200, 3, 7]
    _, tokens = genai_prompt_then_greedy(package, prompt, 20)
    assert tokens == hf_generate(hf_model(checkpoint), prompt, 20) and len(set(tokens)) >= 4
