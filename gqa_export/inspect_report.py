"""`gqa-export inspect` as data: load a package, describe it, lint it (one JSON-ready dict)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from gqa_export.inspect import experts, layers, load_package, summary
from gqa_export.lints import lint


def inspect_package(path: Path, source: Path | None = None) -> dict[str, Any]:
    pkg = load_package(path, source)
    return {
        "summary": summary(pkg),
        "layers": layers(pkg),
        "experts": experts(pkg),
        "findings": [asdict(f) for f in lint(pkg)],
    }
