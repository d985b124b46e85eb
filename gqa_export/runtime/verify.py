"""`gqa-export verify`: is this package (or release) exactly what gqa-export wrote, and does it run?

A package is checked against its manifest: the manifest's own seal (manifest.py), then every file
it lists (sha256 and size), then files it does not list; then `inspect`'s lints, and with
`smoke` a short greedy generation through onnxruntime-genai. A release root is checked against
release.json the same way (every file of every variant, the model card, files nothing lists),
then each variant as a package. Every problem names the file, relative to the path given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gqa_export.check.lints import lint
from gqa_export.check.reader import load_package
from gqa_export.errors import GqaExportError, InputError
from gqa_export.package.manifest import MANIFEST, sealed_problems, sha256_file
from gqa_export.runtime.providers import runnable_ep
from gqa_export.runtime.run import smoke_run

RELEASE = "release.json"
PART = "part.json"  # a part of a release made on a CI matrix (release/parts.py): listed like a release
# What the Hub adds to a repository and `hf download --local-dir` writes next to the files: not
# part of a release, so a downloaded release still verifies.
HUB_EXTRAS = (".gitattributes", ".cache")


def verify(path: Path, smoke: bool = False) -> dict[str, Any]:
    """A JSON-ready report: {"path", "kind", "problems", "packages": [...], "ok"}."""
    path = path.expanduser()
    hashes = _Hashes()
    if not path.is_dir():
        raise InputError(f"{path} is not a folder; pass a package folder or a release folder")
    if (path / RELEASE).is_file():
        problems, folders = _release_problems(path, hashes)
        kind = "release"
    elif (path / PART).is_file():
        problems, folders = _release_problems(path, hashes, PART)
        kind = "part"
    elif (path / MANIFEST).is_file():
        problems, folders, kind = [], [""], "package"
    else:
        raise InputError(f"{path} holds no {MANIFEST} (a package), {RELEASE} (a release) or {PART} (a part of one)")
    packages = [_verify_package(path, rel, smoke, hashes) for rel in folders]
    problems = _attributed(problems, packages)
    failed = problems or any(p["problems"] or p["errors"] for p in packages)
    return {"path": str(path), "kind": kind, "problems": problems, "packages": packages, "ok": not failed}


def _attributed(problems: list[str], packages: list[dict[str, Any]]) -> list[str]:
    """One shape for packages and releases: a problem with a file inside a package folder is that
    package's (`packages[i].problems`, named once even when release.json and the manifest both
    catch it); the top-level `problems` keep only the release root's own (release.json, the
    model card, files outside every variant). Returns those."""
    for package in packages:
        rel = package["path"]
        if rel != ".":
            mine = [p for p in problems if p.startswith(f"{rel}/")]
            package["problems"] = list(dict.fromkeys([*mine, *package["problems"]]))
    variants = [f"{p['path']}/" for p in packages if p["path"] != "."]
    return [p for p in problems if not p.startswith(tuple(variants))] if variants else problems


def _verify_package(root: Path, rel: str, smoke: bool, hashes: _Hashes) -> dict[str, Any]:
    folder = root / rel if rel else root
    report: dict[str, Any] = {"path": rel or ".", "problems": [], "findings": [], "errors": 0, "smoke": None}
    if not (folder / MANIFEST).is_file():
        report["problems"].append(_named(rel, MANIFEST, "missing"))
        return report
    manifest, sealed = sealed_problems(folder / MANIFEST)
    report["problems"] += [_prefixed(rel, p) for p in sealed]
    listed = (manifest or {}).get("files")
    if isinstance(listed, dict):
        report["problems"] += _file_problems(folder, rel, listed, {MANIFEST}, hashes)
    elif manifest is not None:
        report["problems"].append(_named(rel, MANIFEST, "lists no files"))
    try:
        findings = lint(load_package(folder))
    except GqaExportError as exc:
        report["problems"].append(_prefixed(rel, f"lints: {exc}"))
        return report
    except Exception as exc:  # an ONNX file that no longer parses
        report["problems"].append(_prefixed(rel, f"lints: cannot load the package ({type(exc).__name__}: {exc})"))
        return report
    report["findings"] = [asdict(f) for f in findings]
    report["errors"] = sum(f.severity == "error" for f in findings)
    if smoke and not report["problems"] and not report["errors"]:
        report["smoke"] = _smoke(folder, rel, report["problems"])
    return report


def _smoke(folder: Path, rel: str, problems: list[str]) -> dict[str, Any]:
    ep, note = runnable_ep(folder)
    if ep is None:
        return {"ran": False, "note": note}
    try:
        result = smoke_run(folder, ep)
    except GqaExportError as exc:
        problems.append(_prefixed(rel, str(exc)))
        return {"ran": False, "ep": ep, "note": str(exc)}
    return {"ran": True, "ep": ep, "note": note, "new_tokens": len(result.tokens), "text": result.text}


def listed_problems(root: Path, listing: str) -> list[str]:
    """Problems with a release's (or a part's) listing file and every file under `root`: changed,
    missing, unlisted (the hashes only: no lints, no smoke run)."""
    return _release_problems(root, _Hashes(), listing)[0]


def _release_problems(root: Path, hashes: _Hashes, listing: str = RELEASE) -> tuple[list[str], list[str]]:
    """Problems with release.json (or part.json) and the files it lists; the variant folders to verify next."""
    release, problems = sealed_problems(root / listing)
    if release is None:
        return problems, []
    expected: dict[str, dict[str, Any]] = {}
    for name, entry in (release.get("files") or {}).items():
        expected[name] = entry
    folders = []
    for variant in release.get("variants") or []:
        rel = str(variant.get("path", ""))
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            problems.append(f"{listing}: variant path {rel!r} is not a folder inside the release")
            continue
        folders.append(rel)
        for name, entry in (variant.get("files") or {}).items():
            expected[f"{rel}/{name}"] = entry
    problems += _file_problems(root, "", expected, {listing}, hashes, recursive=True)
    return problems, [f for f in folders if (root / f).is_dir()]


def _file_problems(
    folder: Path, rel: str, expected: dict[str, Any], allowed: set[str], hashes: _Hashes, recursive: bool = False
) -> list[str]:
    """Missing, changed and unlisted files under `folder` (names relative to it)."""
    problems = []
    for name, entry in sorted(expected.items()):
        file = folder / name
        if not file.is_file():
            problems.append(_named(rel, name, "missing"))
            continue
        size = file.stat().st_size
        if isinstance(entry, dict) and entry.get("bytes") not in (None, size):
            problems.append(_named(rel, name, f"changed ({size} bytes, the listing says {entry['bytes']})"))
        elif not isinstance(entry, dict) or hashes.of(file) != entry.get("sha256"):
            problems.append(_named(rel, name, "changed (its sha256 differs from the listing)"))
    present = _walk(folder, recursive)
    for name in sorted(present - set(expected) - allowed):
        problems.append(_named(rel, name, "not listed (an extra file)"))
    return problems


class _Hashes:
    """sha256 per file, computed once: a release lists each file, and so does its manifest."""

    def __init__(self) -> None:
        self._done: dict[Path, str] = {}

    def of(self, path: Path) -> str:
        key = path.resolve()
        if key not in self._done:
            self._done[key] = sha256_file(path)
        return self._done[key]


def _walk(folder: Path, recursive: bool) -> set[str]:
    out = set()
    for item in folder.iterdir():
        if recursive and item.name in HUB_EXTRAS:
            continue
        if item.is_dir() and recursive:
            out |= {f"{item.name}/{name}" for name in _walk(item, True)}
        else:
            out.add(item.name + ("/" if item.is_dir() else ""))
    return out


def _named(rel: str, name: str, what: str) -> str:
    return f"{rel}/{name}: {what}" if rel else f"{name}: {what}"


def _prefixed(rel: str, message: str) -> str:
    return f"{rel}/{message}" if rel else message


def failing(report: dict[str, Any], strict: bool = False) -> bool:
    """Exit status 1: any problem, a lint error, or with `strict` a lint warning."""
    if not report["ok"]:
        return True
    severities: Iterable[str] = (f["severity"] for p in report["packages"] for f in p["findings"])
    return strict and any(s == "warning" for s in severities)
