"""The decoder's 3-D M-RoPE `position_ids [3, B, S]` (IoOptions.mrope_positions, graph/mrope.py)
against HF's language model fed HF's own get_rope_index positions for a prompt with an image block:
contiguous sections (Qwen2.5-VL) and interleaved ones (Qwen3-VL), GQA and standard-Attention graphs.
Text-only packages do not have the input (byte identity: benchmarks/byte_identity.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from multimodal_models import IMAGE_ID
from reference import OrtStepper

from gqa_export.graph.io_options import IoOptions

VISION_START = 302
GRID = [[1, 8, 12]]  # 4 x 6 merged tokens
PROMPT = [5, 17, 33, 90, 4, VISION_START, *[IMAGE_ID] * 24, 11, 250, 7, 64, 19, 3]
STEPS = 5


def export(checkpoint: Path, out: Path, attention: str) -> Path:
    from gqa_export.pipeline import BuildOptions, build

    io = IoOptions(mrope_positions=True)
    build(BuildOptions(str(checkpoint), out, smoke=False, attention=attention, io=io, text_only=True))
    return out


def hf_positions(model: Any, ids: list[int]) -> tuple[np.ndarray, int]:
    """HF's get_rope_index for the prompt: positions [3, 1, S] and the text delta after it."""
    import torch

    tokens = torch.tensor([ids])
    kinds = (tokens == IMAGE_ID).int()
    pos, delta = model.model.get_rope_index(tokens, kinds, image_grid_thw=torch.tensor(GRID))
    return pos.numpy(), int(delta.reshape(-1)[0])


def ort_greedy(package: Path, positions: np.ndarray, delta: int) -> tuple[list[int], np.ndarray]:
    """Prompt then STEPS greedy decode steps, each decode position len + delta on all three rows."""
    stepper = OrtStepper(package)
    tokens = list(PROMPT)
    mask = np.ones((1, len(tokens)), np.int64)
    logits = [stepper.run(np.array([tokens]), mask, {"position_ids": positions})[0]]
    for _ in range(STEPS):
        tokens.append(int(logits[-1][-1].argmax()))
        mask = np.ones((1, len(tokens)), np.int64)
        step = np.full((3, 1, 1), len(tokens) - 1 + delta, np.int64)
        logits.append(stepper.run(np.array([tokens[-1:]]), mask, {"position_ids": step})[0])
    return tokens, np.concatenate(logits)


def hf_all_logits(model: Any, tokens: list[int], positions: np.ndarray, delta: int) -> np.ndarray:
    import torch

    tail = np.arange(len(PROMPT), len(tokens)) + delta
    full = np.concatenate([positions, np.broadcast_to(tail, (3, 1, len(tail)))], axis=2)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), position_ids=torch.from_numpy(full.copy()))
    return out.logits[0].float().numpy()


def mrope_error(checkpoint: Path, package: Path) -> float:
    from reference import hf_model

    model = hf_model(checkpoint)
    positions, delta = hf_positions(model, PROMPT)
    assert (positions[1] != positions[2]).any(), "the image block must have distinct h and w positions"
    tokens, got = ort_greedy(package, positions, delta)
    return float(np.abs(got - hf_all_logits(model, tokens, positions, delta)).max())


CASES = [("qwen2_5_vl", "gqa"), ("qwen2_5_vl", "bias"), ("qwen3_vl_v5", "gqa"), ("qwen3_vl_v5", "bias")]


@pytest.mark.parametrize(("name", "attention"), CASES)
def test_mrope_positions_match_hf(checkpoints, tmp_path, name, attention):
    checkpoint = checkpoints.get(name)
    package = export(checkpoint, tmp_path / "pkg", attention)
    assert mrope_error(checkpoint, package) < 1e-4  # measured 4.8e-6 .. 6.6e-6
    config = (package / "genai_config.json").read_text()
    assert '"position_ids": "position_ids"' in config


def test_mrope_input_only_when_asked(checkpoints, tmp_path):
    import onnx

    from gqa_export.pipeline import BuildOptions, build

    build(BuildOptions(str(checkpoints.get("qwen2_5_vl")), tmp_path / "text", smoke=False, text_only=True))
    names = [i.name for i in onnx.load(tmp_path / "text" / "model.onnx", load_external_data=False).graph.input]
    assert "position_ids" not in names


def test_mrope_needs_sections(checkpoints, tmp_path):
    from gqa_export.errors import InputError

    with pytest.raises(InputError, match="mrope_section"):
        export(checkpoints.get("gqa"), tmp_path / "pkg", "gqa")


def _contiguous(original: Any) -> Any:
    return lambda rope: original(type(rope)(**{**vars(rope), "params": {**rope.params, "mrope_interleaved": False}}))


def _swap_hw(original: Any) -> Any:
    return lambda rope: np.array([{1: 2, 2: 1}.get(int(r), int(r)) for r in original(rope)])


@pytest.mark.parametrize(
    ("name", "mutant"), [("qwen3_vl_v5", "contiguous"), ("qwen2_5_vl", "swap_hw"), ("qwen3_vl_v5", "swap_hw")]
)
def test_mrope_mutant_breaks_parity(checkpoints, tmp_path, monkeypatch, name, mutant):
    """Interleaved sections read as contiguous ones, or the h and w rows swapped: past 1e-4."""
    from gqa_export.graph import mrope

    original = mrope.mrope_rows
    monkeypatch.setattr(mrope, "mrope_rows", (_contiguous if mutant == "contiguous" else _swap_hw)(original))
    checkpoint = checkpoints.get(name)
    assert mrope_error(checkpoint, export(checkpoint, tmp_path / "pkg", "gqa")) > 1e-3  # measured 0.6 .. 0.94


def test_mrope_positions_on_a_hybrid_decoder(checkpoints, builds, tmp_path):
    """Qwen3.5's text decoder (DeltaNet state + gated GQA layers, rotary 16 of head 64, interleaved
    [2, 3, 3]) fed the same image-prompt positions (HF's get_rope_index of the Qwen2.5-VL class)."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("the tiny Qwen3.5 config is written for transformers 5.x")
    from reference import hf_model

    positions, delta = hf_positions(hf_model(checkpoints.get("qwen2_5_vl")), PROMPT)
    checkpoint = builds.checkpoint("qwen3_5_text")
    package = export(checkpoint, tmp_path / "pkg", "gqa")
    tokens, got = ort_greedy(package, positions, delta)
    assert np.abs(got - hf_all_logits(hf_model(checkpoint), tokens, positions, delta)).max() < 1e-4  # measured 1.1e-5
