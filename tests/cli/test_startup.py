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
