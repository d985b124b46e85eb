"""Llama-3's RoPE scaling read back from a GGUF's rope_freqs factors (source/gguf/rope_factors.py).

The real Llama-3.1/3.2 parameters (and a few others) are written as factors the way llama.cpp's
converter does, fitted back, and must reproduce every factor; factors that follow no llama3
curve (a planted bug: one factor off) are refused in one line, never silently approximated.
The end-to-end check (a llama3-scaled checkpoint's F32 GGUF package equals the checkpoint, and
greedy tokens equal llama.cpp's) is the `llama3_rope` family in tests/source/test_gguf_families.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_export.errors import InputError
from gqa_export.source.gguf.rope_factors import llama3_factors, llama3_scaling

CASES = {
    "llama-3.2-1b": (500000.0, 64, 32.0, 1.0, 4.0, 8192),
    "llama-3.1-8b": (500000.0, 128, 8.0, 1.0, 4.0, 8192),
    "tiny": (10000.0, 64, 4.0, 1.0, 4.0, 64),
    "other-ratios": (10000.0, 64, 6.0, 2.0, 8.0, 256),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fitted_scaling_reproduces_every_factor(case):
    base, dim, factor, low, high, original = CASES[case]
    stored = llama3_factors(base, dim, factor, low, high, original).astype(np.float32)
    scaling = llama3_scaling(stored, base, dim, original, "m.gguf")
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == pytest.approx(factor)
    again = llama3_factors(base, dim, scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"],
                           scaling["original_max_position_embeddings"])  # fmt: skip
    np.testing.assert_allclose(again, stored, rtol=1e-5)
    if original == 8192:  # the file's own context gives back the published parameters
        assert scaling["low_freq_factor"] == pytest.approx(low, rel=1e-4)
        assert scaling["high_freq_factor"] == pytest.approx(high, rel=1e-4)


def test_mutant_factors_off_the_curve_are_refused():
    stored = llama3_factors(500000.0, 64, 32.0, 1.0, 4.0, 8192).astype(np.float32)
    middle = int(np.flatnonzero((stored > 1.01) & (stored < 31.9))[1])
    stored[middle] *= 1.05
    with pytest.raises(InputError, match="do not follow Llama-3's scaling"):
        llama3_scaling(stored, 500000.0, 64, 8192, "m.gguf")
