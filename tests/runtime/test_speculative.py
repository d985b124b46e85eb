"""Speculative decoding (docs/speculative.md): `build --draft` packages and `run --ngram` through
onnxruntime-genai give the target's greedy tokens (= HF generate of the target), `run --json`
reports genai's acceptance statistics, and what the runtime cannot rewind is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke
from reference import assert_varied, hf_generate, hf_model

from gqa_export.errors import InputError
from gqa_export.package.draft import DRAFT_GRAPH, SpeculativeOptions, draft_problems, ngram_options, rewind_refusal
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import Sampling, generate_greedy, load, stream
from gqa_export.speculative import build_with_draft

PROMPTS = [[0, 20, 31, 42, 53, 64, 75], [0, 7]]
NEW = 24


@pytest.fixture
def sources(draft_sources: dict[str, Path]) -> dict[str, Path]:
    return draft_sources


@pytest.fixture
def packages(draft_packages: dict[str, Path]) -> dict[str, Path]:
    return draft_packages


def _greedy(package: Path, prompt: list[int]) -> list[int]:
    return generate_greedy(package, prompt, NEW, min_new_tokens=NEW).tokens


def test_draft_package_layout(packages):
    """draft.onnx(+.data) beside model.onnx, model.draft relative to the config folder, the
    speculative block, full logits for both graphs, and every file sealed in the manifest."""
    package = packages["paired"]
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["draft"]["filename"] == DRAFT_GRAPH
    assert config["model"]["draft"]["num_hidden_layers"] == 1
    assert config["speculative"] == {"max_draft_tokens": 4, "min_adaptive_k": 0, "cooldown": False}
    manifest = json.loads((package / "manifest.json").read_text())
    assert {"draft.onnx", "draft.onnx.data"} <= set(manifest["files"])
    assert manifest["options"]["draft"]["layers"] == 1
    assert rewind_refusal(package, "target") is None and draft_problems(package) == []
    result = invoke("verify", package)
    assert result.exit_code == 0, result.output


def test_inspect_shows_the_draft(packages):
    """#34 item 12: `inspect` named the target only; the draft graph, its layers and genai's
    speculative options are listed too (JSON and text), and the plain package has none."""
    report = json.loads(invoke("inspect", packages["paired"], "--json").stdout)
    draft = report["summary"]["draft"]
    assert draft["filename"] == DRAFT_GRAPH and draft["layers"] == 1 and draft["parameters"] > 0
    assert draft["speculative"] == {"max_draft_tokens": 4, "min_adaptive_k": 0, "cooldown": False}
    graphs = {g["filename"]: g["stage"] for g in report["summary"]["graphs"]}
    assert graphs == {"model.onnx": "decoder", DRAFT_GRAPH: "draft"}
    assert {a["graph"] for a in report["layers"]} == {"model.onnx", DRAFT_GRAPH}
    text = invoke("inspect", packages["paired"]).stdout
    row = next(line for line in text.splitlines() if line.startswith("draft "))
    assert f"{DRAFT_GRAPH}: 1 layers" in row and "max_draft_tokens 4" in row, row
    assert "draft" not in json.loads(invoke("inspect", packages["plain"], "--json").stdout)["summary"]


def test_draft_tokens_equal_plain_and_hf(sources, packages):
    """Greedy tokens with the draft = without it = HF generate of the target (not one repeated id)."""
    model = hf_model(sources["target"])
    outputs = []
    for prompt in PROMPTS:
        reference = hf_generate(model, prompt, NEW)
        assert _greedy(packages["plain"], prompt) == reference
        assert _greedy(packages["paired"], prompt) == reference
        assert _greedy(packages["self"], prompt) == reference
        outputs.append(reference)
    assert_varied(outputs)


def test_mutant_draft_in_the_target_slot_fails_the_token_check(sources, packages, tmp_path):
    """Mutant: model.decoder and model.draft swapped (the draft verifies). The tokens are the
    draft's, so the HF comparison of the test above fails on it."""
    folder = tmp_path / "swapped"
    shutil.copytree(packages["paired"], folder)
    config = json.loads((folder / "genai_config.json").read_text())
    model = config["model"]
    model["decoder"], model["draft"] = model["draft"], model["decoder"]
    (folder / "genai_config.json").write_text(json.dumps(config))
    reference = hf_generate(hf_model(sources["target"]), PROMPTS[0], NEW)
    assert _greedy(folder, PROMPTS[0]) != reference


def test_run_json_reports_acceptance(packages):
    """A self-draft accepts every drafted token: 4 per round, one target run per 5 tokens."""
    result = invoke("run", packages["self"], "--prompt", "the cat", "--max-new-tokens", "20", "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)["speculative"]
    assert stats["draft_tokens_proposed"] > 0
    assert stats["draft_tokens_accepted"] == stats["draft_tokens_evaluated"] > 0
    assert stats["acceptance_rate"] == 1.0
    assert stats["target_forward_passes"] < json.loads(result.output)["new_tokens"]
    plain = json.loads(invoke("run", packages["plain"], "--prompt", "the cat", "--json").output)
    assert plain["speculative"] is None


def test_ngram_tokens_equal_plain(packages):
    """Prompt lookup (`run --ngram 2`) on a prompt that repeats itself: genai drafts from the
    prompt (lookup hits) and the tokens are plain greedy's."""
    package = packages["plain"]
    model = load(package, "cpu")
    prompt = [0] + [20, 31, 42, 53] * 6
    plain = stream(package, model, prompt, NEW, Sampling(), lambda _: None)
    ngram = stream(package, model, prompt, NEW, Sampling(), lambda _: None, speculative={"ngram_size": 2})
    assert ngram.tokens == plain.tokens and len(plain.tokens) > 0
    assert ngram.speculative is not None and ngram.speculative["ngram_lookup_hits"] > 0
    assert plain.speculative is None
    assert ngram.speculative["effective_k"] == 4  # genai's default max_draft_tokens
    tuned = {"ngram_size": 2, "max_draft_tokens": 2, "min_adaptive_k": 1, "cooldown": True}
    ngram = stream(package, model, prompt, NEW, Sampling(), lambda _: None, speculative=tuned)
    assert ngram.tokens == plain.tokens and ngram.speculative is not None and ngram.speculative["effective_k"] <= 2
    result = invoke("run", package, "--prompt", "the cat the cat the cat", "--ngram", "2", "--json")
    plain_run = invoke("run", package, "--prompt", "the cat the cat the cat", "--json")
    assert result.exit_code == plain_run.exit_code == 0, result.output
    ran = json.loads(result.output)  # the CLI's run: plain greedy's text, drafted by lookups of 2 tokens
    assert ran["text"] == json.loads(plain_run.output)["text"] and ran["new_tokens"] > 0
    assert ran["speculative"]["ngram_lookup_hits"] > 0 and ran["speculative"]["effective_k"] == 4
    assert ngram_options(2, package) == {"ngram_size": 2}
    args = ("--ngram", "2", "--draft-tokens", "2", "--min-adaptive-k", "1", "--cooldown", "--json")
    result = invoke("run", package, "--prompt", "the cat the cat the cat", *args)
    assert result.exit_code == 0 and json.loads(result.output)["speculative"]["effective_k"] <= 2, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--ngram", "1"), "between 2 and 16"),
        (("--ngram", "3"), "carries a draft model"),
        (("--ngram", "2", "--draft-tokens", "17"), "between 1 and 16"),
        (("--ngram", "2", "--draft-tokens", "0"), "between 1 and 16"),
        (("--ngram", "2", "--draft-tokens", "2", "--min-adaptive-k", "3"), "between 0 and --draft-tokens (2)"),
        (("--ngram", "2", "--min-adaptive-k", "-1"), "between 0 and --draft-tokens (4)"),
        (("--cooldown",), "add --ngram N"),
        (("--min-adaptive-k", "1"), "add --ngram N"),
    ],
)
def test_ngram_refusals(packages, args, message):
    package = packages["paired"] if args[1:2] == ("3",) else packages["plain"]
    result = invoke("run", package, "--prompt", "the", *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_ngram_refused_on_pruned_logits(sources, tmp_path):
    from gqa_export.graph.io_options import IoOptions

    pruned = tmp_path / "pruned"
    build(BuildOptions(str(sources["target"]), pruned, smoke=False, io=IoOptions(prune_lm_head=True)))
    result = invoke("run", pruned, "--prompt", "the", "--ngram", "2")
    assert result.exit_code == 2 and "target logits for every verified token" in result.output


def test_tokenizer_mismatch_refused(sources, tmp_path):
    result = invoke("build", sources["target"], "-o", tmp_path / "x", "--draft", sources["other_vocab"])
    assert result.exit_code == 2 and "vocab_size 320 differs" in result.output
    assert not (tmp_path / "x").exists()


def test_mutant_swapped_token_ids_refused(sources, tmp_path):
    """Mutant: the draft's tokenizer with two ids swapped (same vocabulary size) is refused."""
    draft = tmp_path / "swapped_ids"
    shutil.copytree(sources["draft"], draft)
    data = json.loads((draft / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (draft / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="other token ids"):
        build_with_draft(BuildOptions(str(sources["target"]), tmp_path / "x", smoke=False), str(draft))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prune-lm-head",), "drop --prune-lm-head"),
        (("--attention", "split"), "decoder pipeline"),
        (("--set", "attention.sliding_window_cache=true"), "window-sized KV caches"),
        (("--draft-tokens", "17"), "between 1 and 16"),
        (("--draft-tokens", "3", "--min-adaptive-k", "4"), "between 0 and --draft-tokens (3)"),
        (("--no-lm-head",), "drop --no-lm-head"),
    ],
)
def test_option_refusals(sources, tmp_path, args, message):
    result = invoke("build", sources["target"], "-o", tmp_path / "x", "--draft", sources["draft"], *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("family", ["lfm2", "qwen3_next"])  # a conv state; a conv + a gated-DeltaNet state
def test_hybrid_draft_refused(sources, tmp_path, family):
    """A recurrent-state draft cannot be rewound: one line, exit 2, no package."""
    from dense_models import save_dense

    hybrid = save_dense(tmp_path / family, family)
    result = invoke("build", sources["target"], "-o", tmp_path / "x", "--draft", hybrid, "--no-smoke")
    assert result.exit_code == 2 and "recurrent/convolution state" in result.output, result.output
    assert not (tmp_path / "x").exists()


def test_plan_knows_every_state_mixer():
    """The plan refuses a state-carrying draft before the export by its layers' mixer kinds: the
    kinds it knows are the ones the graph carries state for (a misspelt kind would leave the refusal
    to the written package's check, after both exports)."""
    from gqa_export.graph.recurrent_state import STATE_NAMES
    from gqa_export.plan.draft import STATE_MIXERS

    assert set(STATE_NAMES) == STATE_MIXERS


def test_built_packages_that_cannot_rewind(checkpoints, tmp_path):
    """The facts-based checks behind the refusals: a split pipeline and window-sized caches."""
    source = str(checkpoints.get("mistral_window"))
    build(BuildOptions(source, tmp_path / "split", smoke=False, attention="split"))
    assert "decoder pipeline" in (rewind_refusal(tmp_path / "split", "target") or "")
    window = ("attention.sliding_window_cache=true",)
    build(BuildOptions(source, tmp_path / "window", smoke=False, attention="gqa", settings=window))
    assert "window-sized" in (rewind_refusal(tmp_path / "window", "target") or "")
    build(BuildOptions(source, tmp_path / "plain", smoke=False, attention="gqa"))
    assert rewind_refusal(tmp_path / "plain", "target") is None


def test_speculative_option_ranges(sources, tmp_path, monkeypatch):
    """The ranges genai 0.18 takes (min_adaptive_k also within max_draft_tokens); `build --draft`
    hands --draft-tokens / --min-adaptive-k / --cooldown to the speculative block; the tuning flags
    without --draft are refused."""
    with pytest.raises(InputError, match="between 0 and --draft-tokens"):
        SpeculativeOptions(4, 5).check()
    with pytest.raises(InputError, match="true or false"):
        SpeculativeOptions(4, 1, 1).check()  # type: ignore[arg-type]
    SpeculativeOptions(16, 16, True).check()
    import gqa_export.speculative as speculative

    seen = []
    monkeypatch.setattr(speculative, "build_with_draft", lambda opts, **kwargs: seen.append(opts.speculative))
    flags = ("--draft", sources["draft"], "--draft-tokens", "6", "--min-adaptive-k", "2", "--cooldown", "-q")
    result = invoke("build", sources["target"], "-o", tmp_path / "x", *flags)
    assert seen == [SpeculativeOptions(6, 2, True)], result.output
    for args in (("--cooldown",), ("--min-adaptive-k", "1")):
        result = invoke("build", sources["target"], "-o", tmp_path / "x", *args)
        assert result.exit_code == 2 and "add --draft" in result.output, result.output


def test_release_variant_with_draft(sources, packages, tmp_path):
    """A release spec's `draft` key (relative to the spec) with `draft_tokens`, `min_adaptive_k` and
    `cooldown` builds that variant with the draft inside and those options; its greedy tokens are the
    plain target package's; `verify` accepts the release; the speculative keys without a draft, or
    out of range, are refused naming the variant."""
    import yaml

    shutil.copytree(sources["draft"], tmp_path / "drafts" / "small")
    variant = {"ep": "cpu", "precision": "fp32", "draft": "drafts/small", "draft_tokens": 3}
    spec = {"source": str(sources["target"]), "license": "mit", "smoke": False,
            "variants": [{**variant, "min_adaptive_k": 1, "cooldown": True}]}  # fmt: skip
    (tmp_path / "release.yaml").write_text(yaml.safe_dump(spec))
    result = invoke("release", tmp_path / "release.yaml", "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    package = tmp_path / "out" / "cpu_and_mobile" / "cpu-fp32"
    config = json.loads((package / "genai_config.json").read_text())
    assert config["speculative"] == {"max_draft_tokens": 3, "min_adaptive_k": 1, "cooldown": True}
    assert config["model"]["draft"]["filename"] == DRAFT_GRAPH
    assert [_greedy(package, p) for p in PROMPTS] == [_greedy(packages["plain"], p) for p in PROMPTS]
    assert invoke("verify", tmp_path / "out").exit_code == 0
    for bad, message in (
        ({"ep": "cpu", "precision": "fp32", "draft_tokens": 3}, "draft_tokens needs a draft"),
        ({"ep": "cpu", "precision": "fp32", "cooldown": True}, "cooldown needs a draft"),
        ({**variant, "min_adaptive_k": 4}, "between 0 and --draft-tokens (3)"),
    ):
        (tmp_path / "release.yaml").write_text(yaml.safe_dump({**spec, "variants": [bad]}))
        result = invoke("release", tmp_path / "release.yaml", "-o", tmp_path / "out2")
        assert result.exit_code == 2 and message in result.output, result.output
        assert not (tmp_path / "out2").exists()


def test_cuda_draft_package_structure(sources, tmp_path):
    """A CUDA fp16 pair (structural here: no GPU): the draft block carries the target's provider
    options, the build skips the CPU smoke run with a note, and `run --ep cpu` is refused in one
    line naming cuda (genai 0.18 cannot move the draft to another provider, docs/speculative.md §4)."""
    out = tmp_path / "cuda"
    options = BuildOptions(str(sources["target"]), out, ep="cuda", precision="fp16")
    result = build_with_draft(options, str(sources["draft"]))
    assert result.smoke is None and any("runs only on cuda" in n for n in result.notes)
    model = json.loads((out / "genai_config.json").read_text())["model"]
    assert model["draft"]["session_options"] == model["decoder"]["session_options"]
    assert "cuda" in model["draft"]["session_options"]["provider_options"][0]
    run = invoke("run", out, "--prompt", "the", "--ep", "cpu")
    assert run.exit_code == 2 and "--ep cuda" in run.output and len(run.output.strip().splitlines()) == 1


def test_int4_pair_tokens_equal_int4_plain(sources, tmp_path):
    """The draft takes the target's precision policy (int4 here): the pair's tokens are the int4
    target's own."""
    build(BuildOptions(str(sources["target"]), tmp_path / "plain", smoke=False, precision="int4"))
    build_with_draft(BuildOptions(str(sources["target"]), tmp_path / "pair", precision="int4"), str(sources["draft"]))
    manifest = json.loads((tmp_path / "pair" / "manifest.json").read_text())
    assert manifest["options"]["draft"]["precision"] == "int4"
    outputs = [_greedy(tmp_path / "plain", p) for p in PROMPTS]
    assert [_greedy(tmp_path / "pair", p) for p in PROMPTS] == outputs
    assert_varied(outputs)


def test_draft_tokens_without_a_draft_refused(sources, tmp_path):
    result = invoke("build", sources["target"], "-o", tmp_path / "x", "--draft-tokens", "8")
    assert result.exit_code == 2 and "add --draft" in result.output, result.output
    assert not (tmp_path / "x").exists()


def test_full_multimodal_package_cannot_pair_with_a_draft(gemma3_full_package):
    """genai's multimodal path with a draft was not probed: a full package is refused as target or
    draft (build_with_draft exports the draft as a text decoder and asks the same of the target)."""
    pytest.importorskip("PIL")
    from gqa_export.package.draft import rewind_refusal

    assert "--text-only" in (rewind_refusal(gemma3_full_package, "target") or "")


def test_split_recipe_pairs_with_explicit_gqa(checkpoints, tmp_path):
    """Gemma-3 (ConditionalGeneration, text-only): its recipe picks the split pipeline for image-token
    runs, so `--draft` alone is refused in one line naming `--attention gqa`; with it, target and
    draft are single GQA graphs with full-size caches over windowed layers (window 8), every round
    rejects and rewinds, and the greedy tokens are HF generate's (docs/speculative.md §4.1)."""
    from multimodal_models import save_multimodal

    target = checkpoints.get("gemma3_vision")
    draft = save_multimodal(
        tmp_path / "draft", "gemma3", seed=1, num_hidden_layers=1, layer_types=["sliding_attention"]
    )
    result = invoke("build", target, "-o", tmp_path / "x", "--text-only", "--draft", draft, "--no-smoke", "-q")
    assert result.exit_code == 2 and "pass --attention gqa" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    package = tmp_path / "pair"
    build_with_draft(BuildOptions(str(target), package, smoke=False, attention="gqa", text_only=True), str(draft))
    config = json.loads((package / "genai_config.json").read_text())
    assert "pipeline" not in config["model"]["decoder"] and "pipeline" not in config["model"]["draft"]
    assert draft_problems(package) == []
    model = hf_model(target)
    prompt = [2, 20, 31, 42, 53, 64, 75, 86, 97, 108, 20, 31]  # past the window before the first draft
    reference = hf_generate(model, prompt, NEW)
    result = generate_greedy(package, prompt, NEW, min_new_tokens=NEW)
    assert result.tokens == reference
    assert result.speculative is not None
    assert result.speculative["draft_tokens_accepted"] < result.speculative["draft_tokens_evaluated"]
    assert_varied([reference])
    config["model"]["decoder"], config["model"]["draft"] = config["model"]["draft"], config["model"]["decoder"]
    (package / "genai_config.json").write_text(json.dumps(config))  # mutant: the draft verifies
    assert _greedy(package, prompt) != reference
