"""Greedy tokens through onnxruntime-genai equal HF `generate` (and the package's tokenizer works)."""

from __future__ import annotations

import pytest
from reference import hf_generate, hf_model

from gqa_export.run import generate_greedy, load, smoke_run

PROMPTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog and the cache key value",
    "Once upon a time there lived a small red fox. " * 4,
]
NEW_TOKENS = 48


def _hf_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("variant", ["gqa", "mqa_tied", "llama3_rope", "bf16_sharded"])
def test_genai_greedy_equals_hf_generate(variant, checkpoints, exports):
    import onnxruntime_genai as og

    package = exports.get(variant)
    hf = hf_model(checkpoints.get(variant))
    model = load(package, "cpu")
    genai_tokenizer = og.Tokenizer(model)
    hf_tokenizer = _hf_tokenizer(checkpoints.get(variant))
    for prompt in PROMPTS:
        ids = hf_tokenizer(prompt).input_ids
        # onnxruntime-genai 0.18's encode never adds BOS; the text tokens must be HF's.
        plain = hf_tokenizer(prompt, add_special_tokens=False).input_ids
        assert [int(t) for t in genai_tokenizer.encode(prompt)] == plain
        got = generate_greedy(package, ids, NEW_TOKENS, min_new_tokens=NEW_TOKENS, model=model)
        expected = hf_generate(hf, ids, NEW_TOKENS)
        assert got.tokens == expected, prompt
        assert len(set(expected)) > 3  # a real continuation, not one repeated token


def test_one_token_prompt_generates_like_hf(checkpoints, exports):
    package = exports.get("gqa")
    got = generate_greedy(package, [0], NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    assert got.tokens == hf_generate(hf_model(checkpoints.get("gqa")), [0], NEW_TOKENS)


def test_generation_stops_at_eos(exports):
    """Without min_length the runtime stops on the config's eos id; the result ends with it."""
    package = exports.get("gqa")
    result = generate_greedy(package, [0, 17, 45], 200)
    assert len(result.tokens) <= 200
    if len(result.tokens) < 200:
        assert result.tokens[-1] == 1


def test_smoke_run_reports_speed(exports):
    result = smoke_run(exports.get("gqa"), "cpu")
    assert len(result.tokens) == 16
    assert result.decode_tokens_per_s > 0 and result.prefill_ms > 0
