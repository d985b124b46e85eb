"""The end-to-end part of `--report` (quant_report.json's `logits_vs_float`): the logits at every
position of a fixed prompt set, from a float package and a quantized package of the same model,
both through onnxruntime-genai (a `--prune-lm-head` package through its full-logits view,
runtime/decode.py, so every position is scored either way), as relative L2 error and next-token
agreement. The per-weight part of the report is quant/report.py's.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from gqa_export.runtime.decode import position_logits
from gqa_export.runtime.run import token_budget

PROMPT_SEED = 1234
PROMPTS = 4
PROMPT_LENGTH = 48


def fixed_prompts(vocab_size: int, max_length: int = PROMPT_LENGTH) -> list[list[int]]:
    """PROMPTS fixed prompts of PROMPT_LENGTH ids, or of the package's max_length where that is shorter."""
    rng = np.random.default_rng(PROMPT_SEED)
    upper = min(vocab_size, 32000)
    return [rng.integers(0, upper, PROMPT_LENGTH).tolist()[:max_length] for _ in range(PROMPTS)]


def prompt_logits(package: Path, prompts: list[list[int]]) -> list[np.ndarray]:
    """Each prompt's logits at every position ([len(prompt), V]) on CPU."""
    logits = position_logits(package, "cpu")
    return [logits.at_positions(np.asarray(prompt), 0) for prompt in prompts]


def logit_error(float_package: Path, quant_package: Path, vocab_size: int) -> dict[str, float]:
    prompts = fixed_prompts(vocab_size, token_budget(float_package)[0] or PROMPT_LENGTH)
    ref, got = prompt_logits(float_package, prompts), prompt_logits(quant_package, prompts)
    # logits a class masks to the dtype's lowest value (Chameleon's image tokens) are the same constant in both
    # packages: left out, their squares would overflow the norm and hide every other error
    kept = [r > ml_dtypes.finfo(r.dtype).min for r in ref]
    diff = sum(float(((g[k] - r[k]).astype(np.float64) ** 2).sum()) for g, r, k in zip(got, ref, kept, strict=True))
    norm = sum(float((r[k].astype(np.float64) ** 2).sum()) for r, k in zip(ref, kept, strict=True))
    agree = np.mean([float((g.argmax(-1) == r.argmax(-1)).mean()) for g, r in zip(got, ref, strict=True)])
    positions = sum(len(r) for r in ref)
    return {
        "relative_l2": float(np.sqrt(diff / norm)),
        "next_token_agreement": float(agree),
        "prompts": len(prompts),
        "positions": positions,
    }
