"""ORT logits equal HF transformers logits for the prompt and several decode steps (fp32)."""

from __future__ import annotations

import numpy as np
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode
from variants import ALL_VARIANTS

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250]


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_logits_match_hf_prefill_and_decode(variant, checkpoints, exports):
    package = exports.get(variant)
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens, len(PROMPT))[: got.shape[0]]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0  # the logits carry signal, not all ~0


def test_one_token_prompt_then_decode(checkpoints, exports):
    package = exports.get("gqa")
    tokens, got = ort_prefill_and_decode(package, [0], steps=5)
    ref = hf_logits(hf_model(checkpoints.get("gqa")), tokens)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("prompt_len", "steps"), [(28, 8), (40, 4)])
def test_longrope_switches_tables_like_hf(checkpoints, exports, prompt_len, steps):
    """Phi-3 longrope: short factors up to original_max_position_embeddings (32), long ones past
    it, both for a prompt that crosses the switch during decode and one that starts past it."""
    package = exports.get("phi3_longrope")
    prompt = [(7 * i + 3) % 384 for i in range(prompt_len)]
    tokens, got = ort_prefill_and_decode(package, prompt, steps=steps)
    ref = hf_logits(hf_model(checkpoints.get("phi3_longrope")), tokens, prompt_len)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
