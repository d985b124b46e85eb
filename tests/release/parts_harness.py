"""What the release-part tests share: the 4-variant spec (cpu + cuda, fp32/fp16 + int4, one eval
gate), the CLI in process and as a subprocess, and `Workflow`, which runs the `run:` steps of
docs/ci/github-release.yml as a GitHub runner would. The fixtures are in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gqa_export.cli import app

TESTS = Path(__file__).resolve().parents[1]
REPO = Path(__import__("gqa_export").__file__).resolve().parent.parent
WORKFLOW = REPO / "docs" / "ci" / "github-release.yml"
TRAINED = TESTS / "data" / "tiny-trained"
EVAL_TEXT = TESTS / "data" / "tiny-text" / "eval.txt"
EPOCH = "1700000000"
FOUR = [
    {"ep": "cpu", "precision": "fp32"},
    {"ep": "cpu", "precision": "int4", "gate": {"max_ppl_increase": 50}},
    {"ep": "cuda", "precision": "fp16"},
    {"ep": "cuda", "precision": "int4"},
]
FOLDERS = [
    "cpu_and_mobile/cpu-fp32",
    "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4",
    "cuda/cuda-fp16",
    "cuda/cuda-int4-rtn-block-32",
]
RUNNERS = "cuda=gpu-runner"  # the workflow's vars.GQA_EXPORT_RUNNERS


def invoke(*args: object, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], env={"SOURCE_DATE_EPOCH": EPOCH, **(env or {})})


def cli_env(**extra: str) -> dict[str, str]:
    """A CLI subprocess's environment: this repository's package, no network, one timestamp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTEST_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])]))
    env.update(HF_HUB_OFFLINE="1", COLUMNS="200", PYTHONUNBUFFERED="1", SOURCE_DATE_EPOCH=EPOCH, **extra)
    return env


def write_spec(folder: Path, variants: list[dict[str, Any]] = FOUR, **fields: Any) -> Path:
    spec = {"source": str(TRAINED), "eval": {"text": str(EVAL_TEXT), "window": 128}, "variants": variants, **fields}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "release.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes): two releases compared byte for byte."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class Workflow:
    """The workflow's `run:` steps by id, run with bash as a GitHub runner would: `${{ ... }}` from
    `context` (an expression the test does not know fails it), `gqa-export` on PATH."""

    def __init__(self, root: Path, context: dict[str, str]) -> None:
        self.doc = yaml.safe_load(WORKFLOW.read_text())
        self.context = context
        self.bin = root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "gqa-export"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gqa_export "$@"\n')
        shim.chmod(0o755)

    def step(self, job: str, step_id: str) -> dict[str, Any]:
        return next(s for s in self.doc["jobs"][job]["steps"] if s.get("id") == step_id)

    def expand(self, text: str, matrix: dict[str, str] | None = None) -> str:
        import re

        def value(name: str) -> str:
            if name.startswith("matrix.") and matrix is not None:  # an entry without the key: "" on GitHub
                return str(matrix.get(name[len("matrix.") :], ""))
            return self.context[name]

        return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", lambda m: value(m.group(1)), text)

    def start(self, job: str, step_id: str, cwd: Path, matrix: dict[str, str] | None = None) -> subprocess.Popen:
        step = self.step(job, step_id)
        env = cli_env(PATH=f"{self.bin}{os.pathsep}{os.environ['PATH']}", GITHUB_OUTPUT=str(cwd / "github_output"))
        env["SPEC"] = self.expand(self.doc["env"]["SPEC"])
        env.update({k: self.expand(str(v), matrix) for k, v in (step.get("env") or {}).items()})
        cwd.mkdir(parents=True, exist_ok=True)
        script = self.expand(step["run"], matrix)
        command = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script]
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run(self, job: str, step_id: str, cwd: Path, matrix: dict[str, str] | None = None) -> str:
        process = self.start(job, step_id, cwd, matrix)
        output, _ = process.communicate()
        assert process.returncode == 0, f"{job}/{step_id} failed:\n{output[-3000:]}"
        return output
