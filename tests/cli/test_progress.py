"""Progress with --json: stdout holds only the JSON object, stderr the stage lines (#22).

A CI log (stderr not a TTY) gets plain lines: the stage lines and notes, no bars, no control
characters. `-q` silences them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gqa_export.cli import app

REPO = Path(__file__).resolve().parents[2]
TRAINED = REPO / "tests" / "data" / "tiny-trained"
BUILD_STAGES = ("> build", "> optimize", "> quantize", "> package")
runner = CliRunner()


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    """The real entry point in a subprocess: stdout and stderr are pipes, as in a CI job."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "gqa_export", *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def plain(stderr: str) -> None:
    """No escape sequences, carriage returns or bar glyphs: lines a log viewer shows as they are."""
    assert "\x1b" not in stderr and "\r" not in stderr, repr(stderr[:500])
    assert "━" not in stderr


def test_build_json_keeps_progress_on_stderr(checkpoints, tmp_path):
    result = cli("build", checkpoints.get("gqa"), "-o", tmp_path / "pkg", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # the whole of stdout: one JSON object
    assert report["output"] == str(tmp_path / "pkg") and report["smoke"]["new_tokens"] == 16
    lines = result.stderr.splitlines()
    for stage in (*BUILD_STAGES, "> smoke-run on cpu"):
        assert stage in lines, result.stderr
    plain(result.stderr)


def test_quiet_silences_progress(checkpoints, tmp_path):
    result = cli("build", checkpoints.get("gqa"), "-o", tmp_path / "pkg", "--json", "-q", "--no-smoke")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["smoke"] is None
    assert not any(line.startswith("> ") for line in result.stderr.splitlines()), result.stderr


def test_quantize_json_keeps_progress_on_stderr(exports, tmp_path):
    result = runner.invoke(app, ["quantize", str(exports.get("gqa")), "-o", str(tmp_path / "q"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["precision"] == "int4"
    assert {"> quantize", "> package", "> smoke-run on cpu"} <= set(result.stderr.splitlines()), result.stderr
    plain(result.stderr)
    quiet = runner.invoke(app, ["quantize", str(exports.get("gqa")), "-o", str(tmp_path / "q2"), "--json", "-q"])
    assert quiet.exit_code == 0, quiet.output
    assert json.loads(quiet.stdout)["precision"] == "int4" and quiet.stderr == ""


def test_release_json_keeps_progress_on_stderr(tmp_path):
    spec = tmp_path / "release.yaml"
    spec.write_text(yaml.safe_dump({"source": str(TRAINED), "variants": [{"ep": "cpu", "precision": "fp32"}]}))
    result = runner.invoke(app, ["release", str(spec), "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    assert [v["path"] for v in json.loads(result.stdout)["variants"]] == ["cpu_and_mobile/cpu-fp32"]
    lines = result.stderr.splitlines()
    for stage in BUILD_STAGES:
        assert f"> [1/1 cpu_and_mobile/cpu-fp32] {stage[2:]}" in lines, result.stderr
    assert "> model card and release.json" in lines
    plain(result.stderr)
