"""The default package serves through every onnxruntime-genai API, not only the Generator.

onnxruntime-genai decides that a package is "pruned" from the static dim 1 of `logits`; a pruned
(last-token logits) package then fails in `og.Engine` and n-gram decoding, and a draft-model
target verifies token by token. The default is therefore full logits, and each API is checked on
it against the plain Generator's greedy tokens. The `--prune-lm-head` package is the mutant: the
same checks fail on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gqa_export.graph.io_options import IoOptions
from gqa_export.pipeline import BuildOptions, build

TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"
NEW = 16


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    build(BuildOptions(str(TRAINED), root / "default", smoke=False))
    build(BuildOptions(str(TRAINED), root / "pruned", smoke=False, io=IoOptions(prune_lm_head=True)))
    return root


def _prompts(model) -> list[list[int]]:
    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    return [list(tokenizer.encode(text)) for text in ("Once upon a time", "the cat sat on the mat and the cat")]


def _generator(model, prompt: list[int], speculative: dict | None = None) -> tuple[list[int], dict | None]:
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + NEW)
    if speculative:
        params.set_speculative_options(**speculative)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    tokens: list[int] = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.extend(int(t) for t in generator.get_next_tokens())
    return tokens, generator.get_speculative_stats() if speculative is not None else None


def _engine(model, prompts: list[list[int]]) -> list[list[int]]:
    """Two requests through og.Engine (static batching), greedy; raises on a failed event."""
    import onnxruntime_genai as og

    engine = og.Engine(model)
    requests = []
    for prompt in prompts:
        request = engine.create_request()
        options = og.TurnOptions(request)
        options.set_do_sample(False)
        options.set_max_generated_tokens(NEW)
        options.set_min_generated_tokens(NEW)
        request.begin_turn(np.array(prompt, np.int32), options)
        requests.append(request)
    out: list[list[int]] = [[] for _ in prompts]
    buffer = engine.create_event_buffer(64)
    for _ in range(10 * NEW):
        if not engine.has_pending_requests():
            break
        for event in engine.run(buffer):
            if int(event.flags) & int(og.EngineEventFlags.FAILED):
                raise RuntimeError(f"og.Engine failed: {event.error_code}")
            if int(event.flags) & int(og.EngineEventFlags.TOKEN):
                out[next(i for i, r in enumerate(requests) if r == event.request)].append(int(event.token))
    return out


def _setup(package: Path):
    import onnxruntime_genai as og

    model = og.Model(str(package))
    prompts = _prompts(model)
    plain = [_generator(model, p)[0] for p in prompts]
    assert all(len(set(tokens)) > 3 for tokens in plain), plain  # real continuations, not one repeated id
    return model, prompts, plain


def _check_engine(model, prompts, plain) -> None:
    assert _engine(model, prompts) == plain


def _check_ngram(model, prompts, plain) -> None:
    tokens, stats = _generator(model, prompts[1], {"ngram_size": 2, "max_draft_tokens": 4})
    assert tokens == plain[1] and stats is not None and stats["draft_tokens_evaluated"] > 0


def _check_draft_model(package: Path, prompts, plain) -> None:
    """The package drafts for itself: every draft is right, so the target needs far fewer passes
    than tokens (a pruned target verifies token by token)."""
    import onnxruntime_genai as og

    pair = package.parent / f"{package.name}-draft-pair"
    shutil.copytree(package, pair, dirs_exist_ok=True)
    config = json.loads((pair / "genai_config.json").read_text())
    config["model"]["draft"] = json.loads(json.dumps(config["model"]["decoder"]))
    config["speculative"] = {"max_draft_tokens": 4}
    (pair / "genai_config.json").write_text(json.dumps(config))
    tokens, stats = _generator(og.Model(str(pair)), prompts[1], {})  # {}: the config's speculative block
    assert tokens == plain[1] and stats is not None
    assert 0 < stats["target_forward_passes"] <= NEW // 2, stats


def test_default_package_serves_through_engine_and_speculative_decoding(packages):
    """og.Engine (two requests), n-gram and draft-model decoding give the Generator's greedy tokens."""
    model, prompts, plain = _setup(packages / "default")
    _check_engine(model, prompts, plain)
    _check_ngram(model, prompts, plain)
    _check_draft_model(packages / "default", prompts, plain)


def test_mutant_pruned_package_fails_each_serving_check(packages):
    """The checks bite: with last-token logits each API fails its check, for its own reason."""
    model, prompts, plain = _setup(packages / "pruned")
    with pytest.raises(RuntimeError, match="ENGINE_EXECUTION_FAILURE"):
        _check_engine(model, prompts, plain)
    with pytest.raises(Exception, match="requires target logits for every verified token"):
        _check_ngram(model, prompts, plain)
    with pytest.raises(AssertionError, match=r"assert \d+ <= \(16 // 2\)"):  # 19 target passes for 16 tokens
        _check_draft_model(packages / "pruned", prompts, plain)
