"""Reproducible bytes: two exports of the same inputs and options are identical, manifest included;
nothing machine-specific in any file; the manifest is sealed (its digest covers every field)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from moe_models import save_moe

from gqa_export.errors import InputError
from gqa_export.package.manifest import canonical_digest, created_at, sealed_problems

EPOCH = "1700000000"

# (checkpoint, build arguments): quantization, a two-graph pipeline, fp16 CUDA graphs, experts
CASES = {
    "llama-split-int4": ("gqa", ["--attention", "split", "-p", "int4"]),
    "llama-bias-cuda-fp16": ("gqa", ["--ep", "cuda", "--attention", "bias", "-p", "fp16"]),
    "gemma4-int8": ("gemma4_mix_bf16", ["-p", "int8"]),
    "qwen3_moe-int4": ("qwen3_moe", ["-p", "int4"]),
}


def export_twice(source: Path, outs: tuple[Path, Path], args: list[str]) -> None:
    """Two fresh interpreters at once, hash seeds 1 and 2 (set iteration order differs between them)."""
    runs = []
    for seed, out in enumerate(outs, start=1):
        env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "PYTHONHASHSEED": str(seed)}
        command = [sys.executable, "-m", "gqa_export", "build", str(source), "-o", str(out), "--no-smoke", "-q", *args]
        runs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr


@pytest.fixture(scope="module")
def sources(checkpoints, tmp_path_factory):
    moe_dir = tmp_path_factory.mktemp("moe")

    def get(name: str) -> Path:
        return save_moe(moe_dir / name, name) if name == "qwen3_moe" else checkpoints.get(name)

    return get


@pytest.mark.parametrize("case", CASES)
def test_two_exports_are_byte_identical(sources, tmp_path, case):
    name, args = CASES[case]
    source = sources(name)
    first, second = tmp_path / "first", tmp_path / "second"
    export_twice(source, (first, second), args)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    for file in names:
        assert (first / file).read_bytes() == (second / file).read_bytes(), f"{file} differs between two exports"
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["created"] == "2023-11-14T22:13:20+00:00"  # SOURCE_DATE_EPOCH
    # nothing machine-specific in any text file of the package
    machine = [str(source), str(source.parent), str(tmp_path), socket.gethostname(), os.path.expanduser("~")]
    for file in names:
        if file.endswith((".json", ".txt", ".jinja", ".model")):
            text = (first / file).read_text(errors="replace")
            for value in machine:
                assert value not in text, f"{file} holds {value!r}"
    onnx_files = [f for f in names if f.endswith(".onnx")]
    for file in onnx_files:  # external data locations are relative names
        data = (first / file).read_bytes()
        assert str(tmp_path).encode() not in data and str(source).encode() not in data


def test_created_comes_from_source_date_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert created_at() == "1970-01-01T00:00:00+00:00"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(InputError, match="SOURCE_DATE_EPOCH must be a whole number"):
        created_at()


def test_bad_source_date_epoch_is_one_line_exit_2(checkpoints, tmp_path):
    env = {**os.environ, "SOURCE_DATE_EPOCH": "soon"}
    out = tmp_path / "pkg"
    command = [sys.executable, "-m", "gqa_export", "build", str(checkpoints.get("gqa")), "-o", str(out), "--no-smoke"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "SOURCE_DATE_EPOCH" in result.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_manifest_seal_covers_every_field(exports, tmp_path):
    package = exports.get("gqa")
    manifest, problems = sealed_problems(package / "manifest.json")
    assert problems == [] and manifest is not None
    assert manifest["digest"] == canonical_digest(manifest)
    edited = tmp_path / "manifest.json"
    for change in ({"options": {**manifest["options"], "precision": "int8"}}, {"created": "2020-01-01T00:00:00+00:00"}):
        edited.write_text(json.dumps({**manifest, **change}, indent=2) + "\n")
        assert any("does not match its digest" in p for p in sealed_problems(edited)[1])
    edited.write_text(json.dumps(manifest, indent=1) + "\n")  # same content, other bytes
    assert any("bytes differ" in p for p in sealed_problems(edited)[1])
