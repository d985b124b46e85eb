"""A release's root: the model card, the source's license files and release.json.

One function writes them for both ways a release is made, `release SPEC -o ROOT` on one machine and
`release assemble` from parts made on a CI matrix (release/combine.py), so the two give the same
bytes by construction: the same variant entries, evaluation record, source record and environment
in, the same files out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gqa_export.package.manifest import created_at, tool_entry, write_sealed
from gqa_export.package.staging import file_digests
from gqa_export.release.card import CardInfo, copy_license_files, write_card
from gqa_export.runtime.verify import RELEASE

FORMAT = "gqa-export-release/1"


def write_root(
    root: Path,
    info: CardInfo,
    entries: list[dict[str, Any]],
    evaluated: bool,
    license_dir: Path,
    source: dict[str, Any],
    measured: dict[str, Any] | None,
    environment: dict[str, Any],
) -> None:
    """README.md, the license files found in `license_dir` (the source, or a part) and the sealed
    release.json listing every file; `environment`: the versions the variants were exported with."""
    write_card(root, info, entries, evaluated=evaluated)
    copy_license_files(license_dir, root)
    document = {
        "format": FORMAT,
        "tool": tool_entry(),
        "created": created_at(),
        "source": source,
        "name": info.title,
        "base_model": info.base_model,
        "license": info.license,
        "eval": measured,
        "variants": entries,
        "files": {name: entry for name, entry in file_digests(root).items() if name != RELEASE},
        **environment,
    }
    write_sealed(root / RELEASE, document)
