"""`gqa-export run` end to end: streamed text, --json, stdin, chat template, sampling, interactive."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.runtime.run import adds_bos

runner = CliRunner()


@pytest.fixture(scope="module")
def package(exports):
    return exports.get("gqa")


def test_json_equals_hf_greedy_with_bos(package, checkpoints):
    from reference import hf_generate, hf_model
    from transformers import AutoTokenizer

    result = runner.invoke(app, ["run", str(package), "--prompt", "Hello world", "--max-new-tokens", "12", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    keys = {"text", "prompt_tokens", "new_tokens", "prefill_ms", "decode_tokens_per_s", "note", "speculative"}
    assert set(data) == keys
    assert data["note"] is None and data["speculative"] is None  # a plain package: no drafting
    ids = AutoTokenizer.from_pretrained(checkpoints.get("gqa"))("Hello world").input_ids  # with BOS, as HF does
    assert data["prompt_tokens"] == len(ids)
    assert data["new_tokens"] <= 12 and data["text"]
    from gqa_export.runtime.chat import Session

    session = Session(package, "cpu", 12, (None, None, None, None), chat=False, system=None)
    result = session.turn("Hello world", None)
    expected = hf_generate(hf_model(checkpoints.get("gqa")), ids, 12)
    assert result.tokens == expected[: len(result.tokens)] and len(result.tokens) >= 1
    if len(result.tokens) < 12:  # stopped early: only on EOS
        assert result.tokens[-1] == 1


def test_streamed_text_and_stats_line(package):
    result = runner.invoke(app, ["run", str(package), "--prompt", "the model", "--max-new-tokens", "8"])
    assert result.exit_code == 0
    assert "prompt tokens, " in result.stderr and "tok/s" in result.stderr
    assert result.stdout.strip()


def test_prompt_from_stdin_matches_argument(package):
    a = runner.invoke(
        app, ["run", str(package), "--prompt", "-", "--json", "--max-new-tokens", "6"], input="quick brown"
    )
    b = runner.invoke(app, ["run", str(package), "--prompt", "quick brown", "--json", "--max-new-tokens", "6"])
    assert json.loads(a.stdout)["text"] == json.loads(b.stdout)["text"]


def test_chat_template_is_applied(package):
    plain = json.loads(runner.invoke(app, ["run", str(package), "--prompt", "hi", "--json"]).stdout)
    chat = json.loads(runner.invoke(app, ["run", str(package), "--prompt", "hi", "--chat", "--json"]).stdout)
    system = json.loads(
        runner.invoke(app, ["run", str(package), "--prompt", "hi", "--system", "be brief", "--json"]).stdout
    )
    # <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant...
    assert plain["prompt_tokens"] < chat["prompt_tokens"] < system["prompt_tokens"]


def test_sampling_is_seeded(package):
    args = [
        "run",
        str(package),
        "--prompt",
        "hello",
        "--json",
        "--temperature",
        "1.5",
        "--top-k",
        "50",
        "--max-new-tokens",
        "20",
    ]
    one = json.loads(runner.invoke(app, [*args, "--seed", "3"]).stdout)["text"]
    two = json.loads(runner.invoke(app, [*args, "--seed", "3"]).stdout)["text"]
    greedy = json.loads(
        runner.invoke(app, ["run", str(package), "--prompt", "hello", "--json", "--max-new-tokens", "20"]).stdout
    )
    assert one == two and one != greedy["text"]


def test_interactive_refeeds_history(package):
    result = runner.invoke(
        app, ["run", str(package), "--interactive", "--max-new-tokens", "4"], input="hello\nagain\n\n"
    )
    assert result.exit_code == 0
    assert result.stderr.count("tokens,") == 2  # one stats line per turn


def test_errors(package, tmp_path):
    assert runner.invoke(app, ["run", str(package)]).exit_code == 2
    missing = runner.invoke(app, ["run", str(tmp_path), "--prompt", "x"])
    assert missing.exit_code == 2 and "not a package folder" in missing.output


def test_adds_bos_follows_the_tokenizer(package, tmp_path):
    assert adds_bos(package)  # TemplateProcessing starting with <|begin_of_text|>
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": False}))
    assert not adds_bos(tmp_path)


def _max_length(package) -> int:
    return json.loads((package / "genai_config.json").read_text())["search"]["max_length"]


def test_a_prompt_longer_than_max_length_is_one_line(package):
    long = "word " * (2 * _max_length(package))
    result = runner.invoke(app, ["run", str(package), "--prompt", long, "--max-new-tokens", "4"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and "Traceback" not in result.output and len(errors) == 1, result.output
    assert "search.max_length" in errors[0] and "--max-length" in errors[0]


def test_new_tokens_beyond_max_length_are_capped_and_said(package):
    limit = _max_length(package)
    result = runner.invoke(
        app, ["run", str(package), "--prompt", "Hello", "--max-new-tokens", str(4 * limit), "--json"]
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["prompt_tokens"] + data["new_tokens"] <= limit
    assert "new tokens at most" in data["note"]


def test_chat_drops_the_oldest_turns_to_fit_and_says_so(package):
    from gqa_export.runtime.chat import Session

    limit = _max_length(package)
    session = Session(package, "cpu", 8, (None, None, None, None), chat=True, system="Be brief.")
    from gqa_export.runtime.run import prompt_tokens

    words = 1
    while len(prompt_tokens(package, session.model, "word " * words, None)) < limit // 3:
        words += 1
    filler = "word " * words  # about a third of max_length a turn: the third turn cannot fit them all
    for _ in range(3):
        session.turn(filler, None)
    assert session.history[0]["role"] == "system"  # the system prompt is never dropped
    result = session.turn("Hello", None)
    notes = [r for r in (result.note,) if r]
    assert notes and "dropped the" in notes[0] and "oldest turn" in notes[0]
    assert session.history[0]["role"] == "system" and session.history[-2]["content"] == "Hello"


def test_bf16_package_on_cpu_is_one_line_saying_what_to_do(checkpoints, tmp_path):
    from gqa_export.pipeline import BuildOptions, build

    out = tmp_path / "bf16"
    build(BuildOptions(str(checkpoints.get("gqa")), out, ep="cuda", precision="bf16", smoke=False))
    result = runner.invoke(app, ["run", str(out), "--prompt", "Hi", "--ep", "cpu"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert "bf16 packages run only on a CUDA GPU" in errors[0] and "--precision fp16/fp32" in errors[0]


def test_missing_cuda_libraries_are_one_line_saying_what_to_install(package, monkeypatch):
    """onnxruntime-genai's own words (as it raised them on a machine without CUDA 13's libraries)."""
    import gqa_export.runtime.chat

    def no_cuda(package, ep):
        raise RuntimeError(
            "Cuda interface not available: Failed to load library: libcublasLt.so.13: cannot open shared object file"
        )

    monkeypatch.setattr(gqa_export.runtime.chat, "load", no_cuda)
    result = runner.invoke(app, ["run", str(package), "--prompt", "Hi", "--ep", "cuda"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "needs CUDA 13" in errors[0] and "cuDNN 9" in errors[0] and "--ep cpu" in errors[0]
