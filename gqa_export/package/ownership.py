"""What `-o` may point at, and what `--overwrite` may replace: only what gqa-export wrote.

`--overwrite` replaces an existing `-o` only when it is an empty folder, a package this tool wrote
(a `manifest.json` whose `tool` is gqa-export, and nothing in the folder that the manifest does
not list) or a release it wrote (`release.json` likewise, with every variant's files; a part of a
release, `part.json`, the same way). Anything
else — a model folder, a documents folder, a repository, a package with a user's notes added — is
refused before any work, so a wrong `-o` can never delete a user's files. `-o` must also stay
clear of the inputs (the source, the input package, the release spec's folder) and of the current
directory: replacing a folder renames it away, so `-o .` or `-o ..` would pull the working
directory out from under the shell. The inputs are every path the command reads: folders (the
source, a draft, PEFT adapters) and files (a recipe, a calibration or evaluation text).

A single-file output (`adapter -o FILE.onnx_adapter`) follows the same rule: `--overwrite`
replaces it only when it is a regular file that carries gqa-export's record of having written it
(package/adapter_file.py seals it), and never when it is or lies inside an input folder (the PEFT
adapter, the base package): `-o peft/adapter_model.safetensors --overwrite` or
`-o merged/model.safetensors --overwrite` are refused with the file left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json

MANIFEST = "manifest.json"
RELEASE = "release.json"
PART = "part.json"  # a part of a release (release/parts.py): its variants' folders, listed like a release's
TOOL = "gqa-export"
_SHOWN = 3  # unknown entries named in the message


def check_clear_of(out_dir: Path, path: Path, what: str, inside_ok: bool = False) -> None:
    """-o must not be `path`, contain it, or (unless `inside_ok`) lie inside it."""
    out, other = out_dir.resolve(), path.resolve()
    if out == other:
        raise InputError(f"output folder {out_dir} is the {what} {path} itself; choose -o outside it")
    if out in other.parents:
        raise InputError(f"output folder {out_dir} contains the {what} {path}; choose -o outside it")
    if not inside_ok and other in out.parents:
        raise InputError(f"output folder {out_dir} is inside the {what} {path}; choose -o outside it")


def check_clear_of_cwd(out_dir: Path) -> None:
    """Never `-o .` or an ancestor of the working directory: --overwrite would move it away."""
    check_clear_of(out_dir, Path.cwd(), "current directory", inside_ok=True)


def local_inputs(*named: tuple[str | Path | None, str]) -> list[tuple[Path, str]]:
    """(path, what) for each input given as a local path that exists (a Hub id or an option not
    given drops out): what -o must stay clear of, to pass to `check_output`."""
    found = []
    for item, what in named:
        path = None if item is None else Path(item).expanduser()
        if path is not None and path.exists():
            found.append((path, what))
    return found


def check_file_clear_of(out_file: Path, path: Path, what: str) -> None:
    """A file -o must not be the input `path` nor lie inside it (a PEFT folder's weights, a file of
    the base package): replacing it would change the input, and a new file there mixes with it."""
    out, other = out_file.resolve(), path.resolve()
    if out == other:
        raise InputError(f"output file {out_file} is the {what} {path} itself; choose -o outside it")
    if other in out.parents:
        raise InputError(f"output file {out_file} is inside the {what} {path}; choose -o outside it")


def check_file_replaceable(out_file: Path, overwrite: bool, foreign: Callable[[Path], str | None], kind: str) -> None:
    """An existing file -o: refused unless `overwrite` and it is gqa-export's own `kind` of file.
    `foreign(path)` says why a regular file is not gqa-export's (None when it is)."""
    if not out_file.exists() and not out_file.is_symlink():
        return
    problem = "is a link" if out_file.is_symlink() else foreign(out_file)
    if problem:
        raise InputError(
            f"{out_file} exists and {problem}; --overwrite replaces only {kind} gqa-export wrote, so move it "
            "away or choose another -o"
        )
    if not overwrite:
        raise InputError(f"{out_file} exists; pass --overwrite to replace it or choose another -o")


def check_replaceable(out_dir: Path) -> None:
    """Refuse (InputError, nothing touched) unless `out_dir` is empty or entirely gqa-export's."""
    problem = _foreign(out_dir)
    if problem:
        raise InputError(
            f"--overwrite replaces only an empty folder or a package or release gqa-export wrote, and {out_dir} "
            f"{problem}; move those files away or choose another -o"
        )


def listed_files(folder: Path) -> set[str] | None:
    """The files (relative paths) that the release.json or manifest.json of gqa-export in `folder`
    lists, itself included; None without one."""
    for listing in (RELEASE, PART):
        if (folder / listing).is_file():
            return _release_files(folder / listing)
    if (folder / MANIFEST).is_file():
        return _package_files(folder / MANIFEST)
    return None


def _foreign(folder: Path) -> str | None:
    """Why `folder` is not gqa-export's to replace (None when it is, or when it is empty)."""
    entries = _entries(folder)
    if not entries:
        return None
    listing = next((name for name in (RELEASE, PART) if (folder / name).is_file()), None)
    if listing is not None:
        listed = _release_files(folder / listing)
        kind = listing
    elif (folder / MANIFEST).is_file():
        listed = _package_files(folder / MANIFEST)
        kind = MANIFEST
    else:
        return f"is not empty and holds no {MANIFEST} or {RELEASE} of gqa-export ({_names(entries)})"
    if listed is None:
        return f"holds a {kind} that gqa-export did not write"
    folders = {p.as_posix() for name in listed for p in Path(name).parents}
    unknown = [e for e in entries if e not in listed and not ((folder / e).is_dir() and e in folders)]
    if unknown:
        return f"holds files its {kind} does not list ({_names(unknown)})"
    return None


def _entries(folder: Path) -> list[str]:
    """Every file, link and folder below `folder`, relative, links not followed."""
    found = []
    stack = [folder]
    while stack:
        for path in sorted(stack.pop().iterdir()):
            found.append(path.relative_to(folder).as_posix())
            if path.is_dir() and not path.is_symlink():
                stack.append(path)
    return found


def _names(entries: list[str]) -> str:
    shown = ", ".join(entries[:_SHOWN])
    return shown + (f" and {len(entries) - _SHOWN} more" if len(entries) > _SHOWN else "")


def _load(path: Path) -> dict[str, Any] | None:
    data = read_json(path)
    if data is None or not isinstance(data.get("tool"), dict) or data["tool"].get("name") != TOOL:
        return None
    return data


def _package_files(manifest: Path) -> set[str] | None:
    data = _load(manifest)
    if data is None or not isinstance(data.get("files"), dict):
        return None
    return {MANIFEST, *map(str, data["files"])}


def _release_files(release: Path) -> set[str] | None:
    data = _load(release)
    if data is None or not isinstance(data.get("files"), dict) or not isinstance(data.get("variants"), list):
        return None
    listed = {release.name, *map(str, data["files"])}
    for variant in data["variants"]:
        if not isinstance(variant, dict) or not isinstance(variant.get("files"), dict):
            return None
        listed.update(_joined(str(variant.get("path", "")), variant["files"]))
    return listed


def _joined(prefix: str, names: Iterable[object]) -> set[str]:
    return {f"{prefix.rstrip('/')}/{name}" for name in names}
