"""Every package gqa_export imports is declared in pyproject.toml (the CLI once imported click,
which only some typer versions bring along: with transformers 4.57 every command died)."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# modules the ORT GenAI runtime pair provides under either of its two distribution names
RUNTIME_PAIR = {
    "onnxruntime": {"onnxruntime", "onnxruntime-gpu"},
    "onnxruntime_genai": {"onnxruntime-genai", "onnxruntime-genai-cuda"},
}
# imported only by `eval --reference HF_FOLDER` (torch is the test reference, never a dependency)
OPTIONAL = {"torch"}


def _imported_top_level_modules() -> set[str]:
    found = set()
    for path in (ROOT / "gqa_export").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "gqa_export"}


def _declared() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index("dependencies = [") : text.index("]", text.index("dependencies = ["))]
    names = re.findall(r'^\s*"([A-Za-z0-9_.-]+)', block, re.M)
    return {name.lower().replace("_", "-") for name in names}


def test_every_imported_package_is_declared():
    declared = _declared()
    owners = metadata.packages_distributions()
    missing = {}
    for module in sorted(_imported_top_level_modules() - OPTIONAL):
        dists = RUNTIME_PAIR.get(module) or {d.lower().replace("_", "-") for d in owners.get(module, [module])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
