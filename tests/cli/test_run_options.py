"""`gqa-export run` says what it changed and refuses what it cannot do (#22 item 3).

Text mode prints GenerationResult.note (new tokens capped to the KV buffer, chat turns dropped) as
one stderr line; out-of-range generation options are one line and exit 2, before the model loads.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_capped_new_tokens_are_said_in_text_mode(exports):
    package = exports.get("gqa")
    limit = json.loads((package / "genai_config.json").read_text())["search"]["max_length"]
    result = runner.invoke(app, ["run", str(package), "--prompt", "Hello", "--max-new-tokens", str(4 * limit)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "new tokens at most" in notes[0] and "max_length" in notes[0], result.stderr
    assert result.stdout.strip()  # the text itself still streams to stdout
    fits = runner.invoke(app, ["run", str(package), "--prompt", "Hello", "--max-new-tokens", "4"])
    assert fits.exit_code == 0 and "note:" not in fits.stderr


def test_dropped_chat_turns_are_said_in_interactive_mode(exports):
    """Three turns of a third of max_length each: the third one drops the oldest turn, and says so."""
    package = exports.get("gqa")
    limit = json.loads((package / "genai_config.json").read_text())["search"]["max_length"]
    from gqa_export.runtime.run import load, prompt_tokens

    model, words = load(package, "cpu"), 1
    while len(prompt_tokens(package, model, "word " * words, None)) < limit // 3:
        words += 1
    filler = "word " * words
    lines = "".join(f"{filler}\n" for _ in range(3))
    args = ["run", str(package), "--interactive", "--max-new-tokens", "4"]
    result = runner.invoke(app, args, input=lines)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    assert notes and "oldest turn" in notes[0], result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "-1"], "--temperature must be above 0, got -1.0"),
        (["--temperature", "0"], "--temperature must be above 0"),
        (["--temperature", "nan"], "--temperature must be above 0"),
        (["--temperature", "inf"], "--temperature must be above 0"),
        (["--top-p", "2"], "--top-p must be above 0 and at most 1, got 2.0"),
        (["--top-p", "0"], "--top-p must be above 0 and at most 1"),
        (["--top-k", "0"], "--top-k must be 1 or more, got 0"),
        (["--top-k", "-3"], "--top-k must be 1 or more"),
        (["--top-k", "100000"], "--top-k must be at most the vocabulary size"),
        (["--seed", "-5"], "--seed must be from 0 to 2147483647, got -5"),
        (["--seed", "10000000000", "--temperature", "0.5"], "--seed must be from 0 to 2147483647"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be 1 or more, got 0"),
        (["--max-new-tokens", "-4"], "--max-new-tokens must be 1 or more"),
    ],
)
def test_out_of_range_generation_options_are_one_line(exports, args, message):
    result = runner.invoke(app, ["run", str(exports.get("gqa")), "--prompt", "Hello", *args])
    assert result.exit_code == 2, result.output
    errors = _errors(result.output)
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.output, result.output
    assert result.stdout == ""


def test_in_range_sampling_runs(exports):
    args = ["--temperature", "0.7", "--top-p", "0.9", "--top-k", "20", "--seed", "7", "--max-new-tokens", "6"]
    first = runner.invoke(app, ["run", str(exports.get("gqa")), "--prompt", "Hello", "--json", *args])
    again = runner.invoke(app, ["run", str(exports.get("gqa")), "--prompt", "Hello", "--json", *args])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["text"] == json.loads(again.stdout)["text"]  # --seed repeats


@pytest.mark.parametrize(
    ("args", "dropped"),
    [(["--prompt", "hello"], "--prompt"), (["--json"], "--json"), (["--prompt", "-", "--json"], "--prompt and --json")],
)
def test_interactive_refuses_what_it_would_ignore(exports, args, dropped):
    """#34 item 12: `run -i --prompt hello` used to chat on stdin and drop the prompt (and --json) unsaid."""
    result = runner.invoke(app, ["run", str(exports.get("gqa")), "-i", *args], input="Hi\n")
    errors = _errors(result.output)
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert errors[0].endswith(f"--interactive reads each turn from stdin and streams the replies: drop {dropped}")
    assert result.stdout == ""


def test_a_package_is_also_named_by_its_genai_config(exports):
    """#34 item 12: `run PKG/genai_config.json` (and `eval`, `quantize`) take the config as its package."""
    package = exports.get("gqa")
    args = ["--prompt", "Hello", "--max-new-tokens", "6", "--json"]
    by_folder = runner.invoke(app, ["run", str(package), *args])
    by_config = runner.invoke(app, ["run", str(package / "genai_config.json"), *args])
    assert by_folder.exit_code == by_config.exit_code == 0, by_config.output
    assert json.loads(by_config.stdout)["text"] == json.loads(by_folder.stdout)["text"]


def test_adapter_on_a_plain_package_names_no_base_option(exports, tmp_path):
    """#34 item 12: `run --adapter` on a package without LoRA inputs said "--base PKG", an option of
    `adapter`, not of `run`."""
    adapter = tmp_path / "mine.onnx_adapter"
    adapter.write_bytes(b"")
    result = runner.invoke(app, ["run", str(exports.get("gqa")), "--adapter", str(adapter), "--prompt", "Hi"])
    errors = _errors(result.output)
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "--base" not in errors[0] and "--adapter needs a multi-LoRA base, but" in errors[0]
    assert "has no LoRA inputs: rebuild it with `gqa-export build --lora-targets" in errors[0]
