"""`gqa-export verify`: a package is exactly what was written, or verify names what changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def package(exports, tmp_path) -> Path:
    copy = tmp_path / "pkg"
    shutil.copytree(exports.get("gqa", "cpu", "int4"), copy)
    return copy


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_fresh_package_verifies(package):
    result = invoke("verify", package, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["kind"] == "package" and report["problems"] == []
    assert report["packages"][0]["problems"] == [] and report["packages"][0]["errors"] == 0


def test_smoke_generates(package):
    result = invoke("verify", package, "--smoke", "--json")
    assert result.exit_code == 0, result.output
    smoke = json.loads(result.stdout)["packages"][0]["smoke"]
    assert smoke["ran"] and smoke["ep"] == "cpu" and smoke["new_tokens"] > 0


@pytest.mark.parametrize(
    "name", ["model.onnx.data", "model.onnx", "genai_config.json", "tokenizer.json", "tokenizer_config.json"]
)
@pytest.mark.parametrize("where", [0.0, 0.5, 1.0])
def test_one_changed_byte_fails_naming_the_file(package, name, where):
    path = package / name
    flip_byte(path, int((path.stat().st_size - 1) * where))
    result = invoke("verify", package)
    assert result.exit_code == 1
    assert f"{name}: changed" in result.output and "FAILED" in result.output


@pytest.mark.parametrize("where", [0.0, 0.3, 0.7, 1.0])
def test_one_changed_byte_in_the_manifest_fails(package, where):
    path = package / "manifest.json"
    flip_byte(path, int((path.stat().st_size - 2) * where))  # not the final newline's low bit
    result = invoke("verify", package, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert any("manifest.json" in p for p in report["packages"][0]["problems"]), report


def test_missing_and_extra_files_are_named(package):
    (package / "tokenizer_config.json").unlink()
    (package / "notes.txt").write_text("hello")
    (package / "sub").mkdir()
    result = invoke("verify", package, "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["packages"][0]["problems"]
    assert "tokenizer_config.json: missing" in problems
    assert "notes.txt: not listed (an extra file)" in problems and "sub/: not listed (an extra file)" in problems


def test_resealed_but_broken_package_fails_its_lints(package):
    """Hashes that match do not make a package right: a config the runtime rejects is a lint error."""
    config = json.loads((package / "genai_config.json").read_text())
    config["model"]["decoder"]["no_such_key"] = 1
    (package / "genai_config.json").write_text(json.dumps(config))
    from gqa_export.package.manifest import finalize

    manifest = json.loads((package / "manifest.json").read_text())
    finalize(package, manifest)
    result = invoke("verify", package)
    assert result.exit_code == 1 and "unknown-config-key" in result.output


def test_strict_fails_on_warnings(package, monkeypatch):
    from gqa_export.check.findings import Finding
    from gqa_export.runtime import verify

    warning = Finding("some-warning", "warning", "worth a look", "look")
    monkeypatch.setattr(verify, "lint", lambda pkg: [warning])
    assert invoke("verify", package).exit_code == 0
    result = invoke("verify", package, "--strict")
    assert result.exit_code == 1 and "some-warning" in result.output


@pytest.mark.parametrize("make", ["missing", "file", "empty_folder"])
def test_not_a_package_is_exit_2(tmp_path, make):
    target = tmp_path / "x"
    if make == "file":
        target.write_text("x")
    elif make == "empty_folder":
        target.mkdir()
    result = invoke("verify", target)
    assert result.exit_code == 2 and "error:" in result.output and len(result.output.strip().splitlines()) == 1
