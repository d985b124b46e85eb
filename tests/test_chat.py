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
    assert set(data) == {"text", "prompt_tokens", "new_tokens", "prefill_ms", "decode_tokens_per_s"}
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
