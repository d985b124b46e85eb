"""Packages onnxruntime-genai cannot generate from on their own (#34 items 3, 4, 6;
runtime/standalone.py): a `--inputs-embeds` build (no input_ids), a `--no-lm-head` build (no logits),
a decoder whose genai_config names an input the graph lacks.

- `build` skips their smoke run and says so on stderr, not only in --json's notes (item 6);
- `run` and `eval` refuse them in one line naming what the decoder lacks and what would work,
  exit 2, instead of genai's "Model input was not found: input_ids" traceback (item 3);
- `verify --smoke` and `quantize` skip what cannot run, say so, and exit 0 (item 4).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()
KINDS = {
    # kind -> (build flag, what the decoder takes or gives instead, what it lacks)
    "inputs_embeds": ("--inputs-embeds", "takes inputs_embeds, not input_ids", "input_ids"),
    "no_lm_head": ("--no-lm-head", "gives hidden_states, not logits", "logits"),
}


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def stages(checkpoints, tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """kind -> (package, the result of the `build` command that wrote it, its smoke run asked for)."""
    root, made = tmp_path_factory.mktemp("stages"), {}
    for kind, (flag, _, _) in KINDS.items():
        out = root / kind
        made[kind] = (out, runner.invoke(app, ["build", str(checkpoints.get("gqa")), "-o", str(out), flag, "--json"]))
    (root / "text.txt").write_text("Once upon a time there was a tiny model that liked to read. " * 8)
    return made


@pytest.mark.parametrize("kind", list(KINDS))
def test_build_says_it_skips_the_smoke_run(stages, kind):
    _, result = stages[kind]
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:") and "no smoke run" in line]
    assert len(notes) == 1 and KINDS[kind][0] in notes[0] and KINDS[kind][1] in notes[0], result.stderr
    summary = json.loads(result.stdout)
    assert summary["smoke"] is None and notes[0].removeprefix("note: ") in summary["notes"]


@pytest.mark.parametrize("command", ["run", "eval"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_run_and_eval_refuse_in_one_line(stages, kind, command):
    package, _ = stages[kind]
    args = ["--prompt", "Hello"] if command == "run" else ["--text", str(package.parent / "text.txt")]
    result = runner.invoke(app, [command, str(package), *args])
    errors = _errors(result.output)
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    flag, instead, _ = KINDS[kind]
    assert f"{package}: onnxruntime-genai cannot generate from it on its own" in errors[0]
    assert instead in errors[0] and f"rebuild without {flag}" in errors[0], errors[0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_verify_smoke_skips_what_cannot_run(stages, kind):
    package, _ = stages[kind]
    result = runner.invoke(app, ["verify", str(package), "--smoke", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    smoke = report["packages"][0]["smoke"]
    assert report["ok"] and smoke["ran"] is False and KINDS[kind][1] in smoke["note"], smoke
    text = runner.invoke(app, ["verify", str(package), "--smoke"])
    assert text.exit_code == 0 and "smoke run not run (onnxruntime-genai cannot generate" in text.stdout


@pytest.mark.parametrize("kind", list(KINDS))
def test_quantize_skips_the_smoke_run_of_what_cannot_run(stages, kind, tmp_path):
    package, _ = stages[kind]
    result = runner.invoke(app, ["quantize", str(package), "-o", str(tmp_path / "int4"), "--json"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:") and "smoke run skipped" in line]
    assert len(notes) == 1 and KINDS[kind][1] in notes[0], result.stderr
    summary = json.loads(result.stdout)
    assert summary["smoke"] is None and any("smoke run skipped" in note for note in summary["notes"])


def test_a_renamed_input_is_named(exports, tmp_path):
    """A genai_config naming an input the graph lacks: the line names it (any missing binding, not
    only the two build flags)."""
    package = Path(shutil.copytree(exports.get("gqa"), tmp_path / "pkg"))
    config = json.loads((package / "genai_config.json").read_text())
    config["model"]["decoder"]["inputs"]["input_ids"] = "tokens"
    (package / "genai_config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["run", str(package), "--prompt", "Hello"])
    errors = _errors(result.output)
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "its decoder takes no tokens input; re-export the package" in errors[0], errors[0]


def test_mutant_without_the_check_is_genais_traceback(stages, monkeypatch):
    """Without the check genai fails when the generator starts: not the one-line contract."""
    from gqa_export.runtime import standalone

    monkeypatch.setattr(standalone, "generation_refusal", lambda package: None)
    result = runner.invoke(app, ["run", str(stages["inputs_embeds"][0]), "--prompt", "Hello"])
    assert result.exit_code != 2 or len(_errors(result.output)) != 1
