"""`--report`'s end-to-end numbers recomputed from the logits in the test (issue #36).

Every earlier check of `logits_vs_float.relative_l2` was an upper bound, which an independent
mutation check passed with the square root dropped (a smaller, wrong number). Here the relative L2
error is sqrt(sum |quantized - float|^2 / sum |float|^2) over every position of the report's fixed
prompts and the next-token agreement the mean of argmax equality, computed twice from the
definition: on known logits (the exact answer is a number the test writes down), and on the logits
of a real int4 build's `--report` run, recomputed with onnxruntime directly (tests/reference.py
`OrtStepper`, not runtime/decode.py) on the float package of the same checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from reference import OrtStepper

from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime import logit_error as module
from gqa_export.runtime.logit_error import PROMPT_LENGTH, PROMPTS, fixed_prompts, logit_error

TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"


def test_known_answer(monkeypatch):
    """Known logits (float 2 everywhere but a row maximum at id 3, quantized 1.5 higher, a quarter
    of one prompt's rows with another maximum): the relative L2 and the agreement (1 - 1/16) the
    definition gives, which a dropped root (0.36 for 0.60) or a swapped base misses."""
    vocab = 10
    ref = [np.full((PROMPT_LENGTH, vocab), 2.0, np.float32) for _ in range(PROMPTS)]
    got = [r + 1.5 for r in ref]
    for g, r in zip(got, ref, strict=True):
        r[:, 3] = 9.0  # the float argmax is 3 everywhere
        g[:, 3] = 10.5
    got[0][: PROMPT_LENGTH // 4, 7] = 20.0  # a quarter of prompt 0 disagrees: agreement 1 - 1/16
    diff = sum(float(((g - r) ** 2).sum()) for g, r in zip(got, ref, strict=True))
    expected = math.sqrt(diff / sum(float((r**2).sum()) for r in ref))
    assert 0.2 < expected < 1.0
    calls = iter([ref, got])
    monkeypatch.setattr(module, "prompt_logits", lambda package, prompts: next(calls))
    measured = logit_error(Path("float"), Path("quantized"), vocab)
    assert measured["relative_l2"] == pytest.approx(expected, rel=1e-12)
    assert measured["next_token_agreement"] == pytest.approx(1 - 1 / 16, rel=1e-12)
    assert measured["prompts"] == PROMPTS and measured["positions"] == PROMPTS * PROMPT_LENGTH


def test_logits_masked_to_the_lowest_value_are_left_out(monkeypatch):
    """Logits a class masks to the dtype's lowest value (Chameleon's image tokens) in both packages: the
    answer is the one without them (their squares would overflow the norm and report 0)."""
    vocab, low = 10, np.finfo(np.float32).min
    ref = [np.full((PROMPT_LENGTH, vocab), 2.0, np.float32) for _ in range(PROMPTS)]
    got = [r + 1.0 for r in ref]
    for g, r in zip(got, ref, strict=True):
        g[:, 8:] = r[:, 8:] = low
    calls = iter([ref, got])
    monkeypatch.setattr(module, "prompt_logits", lambda package, prompts: next(calls))
    assert logit_error(Path("float"), Path("quantized"), vocab)["relative_l2"] == pytest.approx(0.5, rel=1e-12)


def test_fixed_prompts_are_fixed_and_inside_the_vocabulary():
    prompts = fixed_prompts(300)
    assert prompts == fixed_prompts(300) and len(prompts) == PROMPTS
    assert all(len(p) == PROMPT_LENGTH and 0 <= min(p) and max(p) < 300 for p in prompts)
    assert len({tuple(p) for p in prompts}) == PROMPTS


def _logits(package: Path, prompts: list[list[int]]) -> list[np.ndarray]:
    out = []
    for prompt in prompts:
        stepper = OrtStepper(package, max_length=PROMPT_LENGTH + 1)
        out.append(stepper.step(prompt).astype(np.float64))
    return out


def test_an_int4_report_equals_its_recomputation(trained_kv, tmp_path):
    """`build --report` at int4 (its own float reference, removed after): the recorded relative L2
    and agreement equal the ones recomputed here from both packages' logits."""
    package = tmp_path / "int4"
    build(BuildOptions(str(TRAINED), package, precision="int4", report=True, smoke=False))
    recorded = json.loads((package / "quant_report.json").read_text())["logits_vs_float"]
    vocab = json.loads((package / "genai_config.json").read_text())["model"]["vocab_size"]
    prompts = fixed_prompts(vocab)
    ref, got = _logits(trained_kv(None), prompts), _logits(package, prompts)
    diff = sum(float(((g - r) ** 2).sum()) for g, r in zip(got, ref, strict=True))
    expected = math.sqrt(diff / sum(float((r**2).sum()) for r in ref))
    agreement = float(np.mean([(g.argmax(-1) == r.argmax(-1)).mean() for g, r in zip(got, ref, strict=True)]))
    assert 0.005 < expected < 0.5  # int4 moves the trained model's logits, not wildly
    assert recorded["relative_l2"] == pytest.approx(expected, rel=1e-3)
    assert recorded["next_token_agreement"] == pytest.approx(agreement, abs=1 / (PROMPTS * PROMPT_LENGTH))
    assert recorded["positions"] == PROMPTS * PROMPT_LENGTH
