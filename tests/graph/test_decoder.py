"""Phi-3 longrope's table switch during decode against HF's incremental forward (fp32). Every
variant's prompt + decode logits against HF are rows of the family registry (tests/families.py,
tests/arch/test_families.py)."""

from __future__ import annotations

import numpy as np
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode


@pytest.mark.parametrize(("prompt_len", "steps"), [(28, 8), (40, 4)])
def test_longrope_switches_tables_like_hf(builds, prompt_len, steps):
    """Phi-3 longrope: short factors up to original_max_position_embeddings (32), long ones past
    it, both for a prompt that crosses the switch during decode and one that starts past it."""
    package = builds.package("phi3_longrope")
    prompt = [(7 * i + 3) % 384 for i in range(prompt_len)]
    tokens, got = ort_prefill_and_decode(package, prompt, steps=steps)
    ref = hf_logits(hf_model(builds.checkpoint("phi3_longrope")), tokens, prompt_len)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
