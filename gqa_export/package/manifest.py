"""manifest.json: what a package was built from and how, and the hash of every file in it.

Reproducible bytes: two exports of the same inputs with the same options write the same manifest.
Its time is `SOURCE_DATE_EPOCH` when set (the reproducible-builds.org convention; the current time
otherwise), and nothing machine-specific goes in: a local source is named by its folder's name and
the hash of its config.json, a recipe by its file name, whether it is built in, and its hash.

Integrity: `digest` is the sha256 of the canonical JSON (sorted keys, no spaces) of everything else
in the file. `verify` recomputes it and re-serializes the parsed file, so a change to any byte of
the manifest is found, as is a change to any file it lists (their sha256). This detects corruption
and careless edits, not a forger who recomputes the digest: sign the release for that.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.jsonio import write_json
from gqa_export.package.staging import file_digests
from gqa_export.package.writer import WrittenFile
from gqa_export.recipes import Recipe, recipes_dir
from gqa_export.source.fetch import Source

MANIFEST = "manifest.json"
DIGEST_KEY = "digest"
DEPENDENCIES = (
    "onnx", "onnx-ir", "onnxscript", "onnxruntime", "onnxruntime-gpu", "onnxruntime-genai",
    "onnxruntime-genai-cuda", "transformers", "huggingface-hub", "safetensors", "numpy",
)  # fmt: skip


def created_at() -> str:
    """ISO time for `created`: SOURCE_DATE_EPOCH when set, else now (UTC, whole seconds)."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        moment = datetime.now(timezone.utc)
    else:
        try:
            moment = datetime.fromtimestamp(int(raw), timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise InputError(
                f"SOURCE_DATE_EPOCH must be a whole number of seconds since 1970-01-01 UTC, got {raw!r}"
            ) from None
    return moment.isoformat(timespec="seconds")


def tool_entry() -> dict[str, str]:
    return {"name": "gqa-export", "version": __version__}


def source_entry(source: Source) -> dict[str, Any]:
    """Where the weights came from, without local paths: a Hub id and commit, or a folder's name."""
    return {
        "id": Path(source.source_id).name if source.is_local else source.source_id,
        "revision": source.revision,
        "local": source.is_local,
        "config_sha256": sha256_file(source.model_dir / "config.json"),
    }


def recipe_entry(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe, its file named (not located) and hashed."""
    builtin = recipe.path.resolve().parent == recipes_dir().resolve()
    return {**recipe.as_dict(), "file": recipe.path.name, "builtin": builtin, "sha256": sha256_file(recipe.path)}


def environment_entry() -> dict[str, Any]:
    """The versions that shape the bytes: the dependencies gqa-export uses, and Python's."""
    versions = {}
    for name in DEPENDENCIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {"dependencies": versions, "python": platform.python_version()}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_digest(data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def write_sealed(path: Path, data: dict[str, Any]) -> None:
    """Write `data` with its digest as the last key (manifest.json, release.json)."""
    body = {k: v for k, v in data.items() if k != DIGEST_KEY}
    write_json(path, {**body, DIGEST_KEY: canonical_digest(body)})


def finalize(folder: Path, manifest: dict[str, Any], written: Mapping[str, WrittenFile] | None = None) -> None:
    """List every file of the package with its hash (`written`: hashed while written), seal the
    manifest and write it last."""
    manifest["files"] = file_digests(folder, {name: w.as_entry() for name, w in (written or {}).items()})
    write_sealed(folder / MANIFEST, manifest)


def sealed_problems(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """Parse a sealed JSON file; the problems with its bytes and digest (empty when intact)."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except OSError as exc:
        return None, [f"{path.name}: cannot be read ({exc.strerror})"]
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, [f"{path.name}: not valid JSON (the file was modified or truncated)"]
    if not isinstance(data, dict):
        return None, [f"{path.name}: does not hold a JSON object"]
    if DIGEST_KEY not in data:
        return data, [f"{path.name}: has no digest (written by an older gqa-export or edited); rebuild to seal it"]
    problems = []
    if data[DIGEST_KEY] != canonical_digest(data):
        problems.append(f"{path.name}: its content does not match its digest (the file was modified)")
    elif raw != (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode():
        problems.append(f"{path.name}: its bytes differ from what gqa-export writes (the file was modified)")
    return data, problems
