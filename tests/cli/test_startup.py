"""`gqa-export --help` starts in a fraction of a second (#22 item 5): the CLI modules import no
heavy library at module level; each command imports what it runs (benchmarks/startup.py measures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("onnx", "onnx_ir", "numpy", "transformers", "onnxruntime", "onnxruntime_genai", "huggingface_hub", "torch")


def imported_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after `code` (None entries are not imports)."""
    names = f"','.join(m for m in {HEAVY!r} if sys.modules.get(m) is not None)"
    probe = f"{code}\nimport sys\nprint('HEAVY:' + {names}, file=sys.stderr)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY:"))
    return [name for name in line[6:].split(",") if name]


@pytest.mark.parametrize("module", ["gqa_export.cli.app", "gqa_export.cli"])
def test_importing_the_cli_imports_no_heavy_library(module):
    assert imported_after(f"import {module}") == []


@pytest.mark.parametrize("args", [["--help"], ["build", "--help"], ["quantize", "--help"], ["run", "--help"]])
def test_help_imports_no_heavy_library(args):
    run = f"import sys\nsys.argv = ['gqa-export', *{args!r}]\nfrom gqa_export.cli import main\n"
    run += "try:\n    main()\nexcept SystemExit:\n    pass"
    assert imported_after(run) == []


@pytest.mark.parametrize(
    "args",
    [["build", "tests/data/tiny-trained", "-q", "--no-smoke", "-o", "{tmp}/out"], ["recipes", "--json"]],
    ids=["build", "recipes"],
)
def test_the_collector_is_back_on_once_the_command_runs(args, tmp_path):
    """`main` starts with the cyclic garbage collector off for the imports; every command turns it
    back on, the imported objects frozen, before its own work (a long export that never collected
    its reference cycles would grow). A build also checks it at its first stage."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    probe = (
        "import gc, sys\n"
        f"sys.argv = ['gqa-export', *{argv!r}]\n"
        "import gqa_export.source.checkpoint as checkpoint\n"
        "seen = []\n"
        "read = checkpoint.read_configs\n"
        "checkpoint.read_configs = lambda *a, **k: (seen.append(gc.isenabled()), read(*a, **k))[1]\n"
        "from gqa_export.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('COLLECTOR', seen, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    during = "[True]" if args[0] == "build" else "[]"
    assert f"COLLECTOR {during} True True" in done.stdout, done.stdout + done.stderr
