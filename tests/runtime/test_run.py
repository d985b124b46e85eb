"""The package's tokenizer encodes like HF's, generation stops at EOS, the smoke run reports its
speed, a ragged batch equals HF per prompt. Each variant's greedy tokens against HF generate are
rows of the family registry (tests/families.py, tests/arch/test_families.py)."""

from __future__ import annotations

import pytest
from families import TEXT_PROMPTS
from reference import hf_generate, hf_model
from variants import FAMILY_VARIANTS

from gqa_export.runtime.run import generate_greedy, load, smoke_run

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog and the cache key value",
    "Once upon a time there lived a small red fox. " * 4,
]


def _hf_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("variant", ["gqa", "mqa_tied", "llama3_rope", "bf16_sharded", *FAMILY_VARIANTS])
def test_genai_tokenizer_encodes_like_hf(builds, variant):
    """The package's tokenizer: onnxruntime-genai 0.18's encode never adds BOS, and the text tokens
    must be HF's; with BOS they are the registry's TEXT_PROMPTS, whose greedy tokens the family
    registry compares with HF generate (tests/arch/test_families.py)."""
    import onnxruntime_genai as og

    genai_tokenizer = og.Tokenizer(load(builds.package(variant), "cpu"))
    hf_tokenizer = _hf_tokenizer(builds.checkpoint(variant))
    for text, ids in zip(TEXTS, TEXT_PROMPTS, strict=True):
        assert tuple(hf_tokenizer(text).input_ids) == ids
        plain = hf_tokenizer(text, add_special_tokens=False).input_ids
        assert [int(t) for t in genai_tokenizer.encode(text)] == plain


def test_generation_stops_at_eos(builds):
    """Without min_length the runtime stops on the config's eos id; the result ends with it."""
    package = builds.package("gqa")
    result = generate_greedy(package, [0, 17, 45], 200)
    assert len(result.tokens) <= 200
    if len(result.tokens) < 200:
        assert result.tokens[-1] == 1


def test_smoke_run_reports_speed(builds):
    result = smoke_run(builds.package("gqa"), "cpu")
    assert len(result.tokens) == 16
    assert result.decode_tokens_per_s > 0 and result.prefill_ms > 0


def test_a_context_shorter_than_the_builds_own_runs_fits_them_in(checkpoints, tmp_path):
    """max_position_embeddings 12, shorter than what the build runs: the smoke run's prompt + 16 tokens
    (it asked the runtime for 17 and failed every build), the KV calibration's prompt + 16 drift steps,
    --report's 48-token prompts. Each now fits what it runs into the context."""
    import json

    from mutants import edited_checkpoint

    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.request.records import KvQuantOptions

    checkpoint = edited_checkpoint(checkpoints.get("gqa"), tmp_path / "short", max_position_embeddings=12)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, precision="int4", report=True, kv=KvQuantOptions("int8")))
    result = smoke_run(package, "cpu")
    assert result.prompt_tokens + len(result.tokens) == 12
    kv = json.loads((package / "manifest.json").read_text())["options"]["kv_cache"]
    assert kv["calibration_tokens"] >= 2 and kv["drift"]["decode_steps"] >= 1
    assert kv["calibration_tokens"] + kv["drift"]["decode_steps"] + 1 <= 12
    report = json.loads((package / "quant_report.json").read_text())["logits_vs_float"]
    assert report["positions"] == report["prompts"] * 12


def test_ragged_batch_matches_hf_per_prompt(builds):
    """Batch 2 with prompts of different lengths: genai right-pads with pad_token_id, which is
    the layout GroupQueryAttention's seqlens_k expects; each row equals HF on its own."""
    import numpy as np
    import onnxruntime_genai as og

    package = builds.package("gqa")
    model = load(package, "cpu")
    prompts = [[0, 45, 319, 81], [0, 17, 45, 99, 200, 3, 7, 120, 64]]
    width, new = max(map(len, prompts)), 24
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, batch_size=2, max_length=width + new, min_length=width + new)
    generator = og.Generator(model, params)
    pad = 5  # the checkpoint's pad_token_id
    generator.append_tokens(np.array([p + [pad] * (width - len(p)) for p in prompts], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    hf = hf_model(builds.checkpoint("gqa"))
    for row, prompt in enumerate(prompts):
        sequence = [int(t) for t in generator.get_sequence(row)]
        assert sequence[: len(prompt)] == prompt
        assert sequence[width:] == hf_generate(hf, prompt, new)
