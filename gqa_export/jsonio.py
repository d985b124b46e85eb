"""The JSON files of checkpoints and packages, read and written one way everywhere.

Two readers, for the two situations: `read_json` for a file that may be absent or broken without
that being the user's problem (generation_config.json, a package's manifest when only looked at:
None then), and `read_json_object` for a file the command cannot go on without (one sentence,
exit 2, naming the file). Both insist on a JSON object: a list or a number where an object belongs
is as broken as bad syntax. `write_json` writes the form every package file has (indent 2, UTF-8,
a final newline), which the manifest's hashes and the release seal rely on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError


def read_json(path: Path) -> dict[str, Any] | None:
    """An optional JSON object: None when the file is absent, unreadable or not an object."""
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_json_object(path: Path, fix: str = "") -> dict[str, Any]:
    """A required JSON object; InputError naming the file (and `fix`, what to do) otherwise."""
    tail = f"; {fix}" if fix else ""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path} is missing{tail}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc}){tail}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a JSON object{tail}")
    return data


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
