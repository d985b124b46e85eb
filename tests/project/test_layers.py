"""The stages import in pipeline order (docs/architecture.md §1): pyproject.toml's import-linter
contracts hold on this tree with no import ignored, and each planted break of them -- an upward
import, an import of the CLI, a base module importing a stage, an import loop inside a package, a
module with no layer -- fails exactly the contracts it breaks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports('pyproject.toml', no_cache=True, no_logo=True))"
)
NAMES = {  # contract id -> its name in pyproject.toml (the report prints names, not ids)
    "layers": "stages import in pipeline order (cli on top, the base modules at the bottom)",
    "base": "the base modules import nothing above them",
    "cli": "nothing under gqa_export imports the CLI (it only parses and prints)",
    "acyclic": "no import loop among the modules of any package, at any depth",
}
VERDICT = re.compile(r"^(?P<name>.+?) (?P<verdict>KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")
# mutant -> (file in a copy of the tree, the line appended to it, the contracts it breaks); an
# upward import also closes a loop with the import the other way, so it breaks `acyclic` too
MUTANTS = {
    "model_imports_a_runner": ("gqa_export/model/dims.py", "import gqa_export.pipeline", {"layers", "acyclic"}),
    "quant_imports_runtime": ("gqa_export/quant/report.py", "import gqa_export.runtime.run", {"layers", "acyclic"}),
    "graph_imports_the_cli": ("gqa_export/graph/rotary.py", "import gqa_export.cli.app", {"layers", "cli", "acyclic"}),
    "base_module_imports_a_stage": ("gqa_export/units.py", "import gqa_export.model.dims", {"layers", "base"}),
    "loop_inside_graph": ("gqa_export/graph/builder.py", "import gqa_export.graph.decoder", {"acyclic"}),
    "module_without_a_layer": ("gqa_export/stray.py", "import gqa_export.errors", {"layers"}),
}  # fmt: skip


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the tree at `root` (its gqa_export/ and pyproject.toml), in a fresh
    process started there: the venv holds gqa_export installed editable from another checkout, and
    the working folder comes first on sys.path, so the graph is this tree's. No cache is written."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def broken_contracts(report: str) -> set[str]:
    """The ids of the contracts the report calls BROKEN; every contract must have its verdict line."""
    verdicts = {m["name"]: m["verdict"] for line in report.splitlines() if (m := VERDICT.match(line.rstrip()))}
    assert set(verdicts) == set(NAMES.values()), report
    return {contract for contract, name in NAMES.items() if verdicts[name] == "BROKEN"}


def _copy(dest: Path) -> Path:
    shutil.copytree(ROOT / "gqa_export", dest / "gqa_export", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_contracts_hold():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert broken_contracts(result.stdout) == set(), result.stdout


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_planted_break_fails_the_contracts_it_breaks(tmp_path, mutant):
    file, line, broken = MUTANTS[mutant]
    target = _copy(tmp_path) / file
    target.write_text((target.read_text() if target.exists() else '"""planted"""\n') + f"\n{line}\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken_contracts(result.stdout) == broken, result.stdout


def test_no_contract_ignores_an_import():
    """Every upward import the layering work found is gone: no contract carries an exception that
    would let one hide (an ignore line would also have to match an import to pass)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert {c["id"] for c in contracts} == set(NAMES)
    assert [c["id"] for c in contracts if c.get("ignore_imports")] == []
