"""Is this path a package? One sentence when it is not, saying what it is instead.

`inspect` and `run` take a package folder (`inspect` also its genai_config.json or a bare .onnx).
Two near misses deserve more than "no genai_config.json": a file that is neither (`inspect
README.md` used to blame the file's folder), and a release root, whose packages sit one or two
folders down (`cpu_and_mobile/cpu-int4-...`): the sentence names its variants, so the next command
is a copy away.
"""

from __future__ import annotations

from pathlib import Path

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json

CONFIG = "genai_config.json"
RELEASE = "release.json"


def release_variants(folder: Path) -> list[str]:
    """The variant folders of a release root: release.json's `variants[].path`, else (release.json
    unreadable) every folder below holding a genai_config.json; [] when `folder` is no release."""
    if not (folder / RELEASE).is_file():
        return []
    entries = (read_json(folder / RELEASE) or {}).get("variants")
    listed = (
        [v["path"] for v in entries if isinstance(v, dict) and isinstance(v.get("path"), str)]
        if isinstance(entries, list)
        else []
    )
    if listed:
        return listed
    return sorted(str(p.parent.relative_to(folder)) for p in folder.glob(f"*/*/{CONFIG}"))


def check_package_path(path: Path, files: bool) -> None:
    """InputError unless `path` is a package folder, or with `files` its genai_config.json or an .onnx
    file; the sentence says what the path is instead (missing, another file, a release root)."""
    wanted = "a package folder, its genai_config.json or an .onnx file" if files else "a package folder"
    if not path.exists():
        raise InputError(f"{path} does not exist; pass {wanted}")
    if path.is_file():
        if files and (path.suffix == ".onnx" or path.name == CONFIG):
            return
        raise InputError(f"{path} is a file, not {wanted}")
    if (path / CONFIG).is_file():
        return
    variants = release_variants(path)
    if variants:
        names = ", ".join(variants)
        raise InputError(
            f"{path} is a release of {len(variants)} package(s) ({names}), not one package; "
            f"pass a variant's folder, e.g. {path / variants[0]}"
        )
    raise InputError(f"{path} is not a package folder (no {CONFIG}); pass {wanted}")
