"""The hand-run scripts under benchmarks/ import names that exist in gqa_export.

They run by hand (the device check only on the rare session lent a GPU), so no other test executes
them: the first GPU session found `benchmarks/device_check.sh` importing `cuda_device_available` from
a module it had moved out of, after its eleven CUDA builds, and lost its table. This reads every
`from gqa_export... import ...` in benchmarks/*.py and in the Python heredocs of benchmarks/*.sh and
resolves each name.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
HEREDOC = re.compile(r"<<'?PY'?[^\n]*\n(.*?)\nPY\n", re.S)


def _sources() -> list[tuple[str, str]]:
    sources = [(path.name, path.read_text()) for path in sorted(BENCHMARKS.glob("*.py"))]
    for path in sorted(BENCHMARKS.glob("*.sh")):
        for index, block in enumerate(HEREDOC.findall(path.read_text())):
            sources.append((f"{path.name}#heredoc{index}", block))
    return sources


def _gqa_imports(source: str) -> list[tuple[str, str | None]]:
    """(module, name) for each `from gqa_export.x import name`; (module, None) for `import gqa_export.x`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gqa_export"):
            found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names if alias.name.startswith("gqa_export"))
    return found


def test_heredocs_are_found():
    """The device check's two table writers are among the sources (the pattern still matches them)."""
    names = [name for name, _ in _sources()]
    assert sum(name.startswith("device_check.sh#") for name in names) >= 2


@pytest.mark.parametrize(("script", "source"), _sources(), ids=[name for name, _ in _sources()])
def test_gqa_export_names_resolve(script: str, source: str):
    missing = []
    for module_name, name in _gqa_imports(source):
        module = importlib.import_module(module_name)
        if name is not None and not hasattr(module, name):
            try:  # a submodule imported by name
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"{script} imports names gqa_export no longer has: {missing}"
