"""ORT logits equal HF transformers logits for the prompt and several decode steps (fp32)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LLAMA_VARIANTS
from reference import hf_logits, hf_model, ort_prefill_and_decode

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250]


@pytest.mark.parametrize("variant", list(LLAMA_VARIANTS))
def test_logits_match_hf_prefill_and_decode(variant, checkpoints, exports):
    package = exports.get(variant)
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens)[: got.shape[0]]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0  # the logits carry signal, not all ~0


def test_one_token_prompt_then_decode(checkpoints, exports):
    package = exports.get("gqa")
    tokens, got = ort_prefill_and_decode(package, [0], steps=5)
    ref = hf_logits(hf_model(checkpoints.get("gqa")), tokens)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
