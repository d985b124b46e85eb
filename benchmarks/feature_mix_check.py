"""Feature mixes the test suite does not have, per family: logits vs HF (gqa) and 30 greedy tokens vs
HF generate in every attention mode. Run by hand: `python benchmarks/feature_mix_check.py`.
"""

import shutil
import sys
import tempfile

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
from pathlib import Path

import numpy as np
import tiny_models
from reference import hf_generate, hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy

root = Path(tempfile.mkdtemp(prefix="feature-mix-"))
CASES = {
    "qwen2_tied_hd64": (
        "qwen2",
        dict(tie_word_embeddings=True, hidden_size=128, num_attention_heads=2, num_key_value_heads=1),
    ),
    "gemma2_mqa_hd64": (
        "gemma2",
        dict(
            num_key_value_heads=1,
            head_dim=64,
            query_pre_attn_scalar=64,
            sliding_window=6,
            tie_word_embeddings=False,
            num_hidden_layers=4,
        ),
    ),
    "gemma3_pattern6": (
        "gemma3_text",
        dict(num_hidden_layers=7, sliding_window=5, tie_word_embeddings=False, head_dim=32),
    ),
    "phi4mini_like": (  # partial rotary 0.75 of head_dim 64 + longrope
        "phi3",
        dict(
            hidden_size=256,
            num_attention_heads=4,
            num_key_value_heads=2,
            partial_rotary_factor=0.75,
            original_max_position_embeddings=64,
            rope_scaling={
                "type": "longrope",
                "short_factor": [1.0 + 0.1 * i for i in range(24)],
                "long_factor": [1.0 + 0.5 * i for i in range(24)],
            },
        ),
    ),
    "llama_mqa_mlpbias": ("llama", dict(num_key_value_heads=1, mlp_bias=True, rms_norm_eps=1e-6)),
    "mistral_nowindow": ("mistral", dict(sliding_window=None, head_dim=32)),
    "qwen3_window": (
        "qwen3",
        dict(use_sliding_window=True, sliding_window=6, max_window_layers=1, num_hidden_layers=3, head_dim=16),
    ),
    "granite_tied": (
        "granite",
        dict(
            tie_word_embeddings=True,
            embedding_multiplier=2.0,
            residual_multiplier=0.3,
            logits_scaling=4.0,
            attention_multiplier=0.05,
        ),
    ),
    "smollm3_window": (
        "smollm3",
        dict(use_sliding_window=True, sliding_window=6, no_rope_layers=[1, 0, 1, 0], num_hidden_layers=4),
    ),
    "olmo2_gqa": ("olmo2", dict(num_key_value_heads=2, num_attention_heads=4, initializer_range=1.0)),
    "gemma_mha_hd16": ("gemma", dict(num_key_value_heads=4, head_dim=16, initializer_range=0.5)),
}
prompt = [(13 * i + 7) % 380 for i in range(20)]
for name, (mt, ov) in CASES.items():
    try:
        d = tiny_models.save_model(root / name, mt, **ov)
        hf = hf_model(d)
        for mode in ("gqa", "split", "bias"):
            out = root / f"{name}-{mode}"
            build(BuildOptions(str(d), out, attention=mode))
            if mode == "gqa":
                toks, got = ort_prefill_and_decode(out, prompt, 5)
                ref = hf_logits(hf, toks, len(prompt))
                err = float(np.abs(got - ref).max())
            g = generate_greedy(out, prompt, 30, min_new_tokens=30).tokens
            e = hf_generate(hf, prompt, 30)
            print(
                name,
                mode,
                f"logit err {err:.2e}" if mode == "gqa" else "",
                "tokens equal"
                if g == e
                else f"TOKENS DIFFER at {next(i for i, (a, b) in enumerate(zip(g, e, strict=False)) if a != b)}",
                flush=True,
            )
    except Exception as exc:
        print(name, "FAILED", type(exc).__name__, str(exc)[:300], flush=True)

shutil.rmtree(root, ignore_errors=True)
