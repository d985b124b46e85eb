"""Is this path a package? One sentence when it is not, saying what it is instead.

`run`, `eval` and `quantize` take a package folder or its genai_config.json (`inspect` also a bare
.onnx), whose genai_config.json must hold what every command reads and onnxruntime-genai needs
(`package_config`: one sentence naming the key, not a KeyError or genai's bare RuntimeError). Two
near misses deserve more than "no genai_config.json": a file that is neither (`inspect
README.md` used to blame the file's folder), and a release root, whose packages sit one or two
folders down (`cpu_and_mobile/cpu-int4-...`): the sentence names its variants, so the next command
is a copy away.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json, read_json_object

CONFIG = "genai_config.json"
RELEASE = "release.json"
REEXPORT = "re-export the package"
# the keys of genai_config.json every command reads and onnxruntime-genai needs to load a package
# (its own errors for them are a bare RuntimeError, or a zero it finds only when generating)
_OBJECTS = (("model",), ("model", "decoder"))
_COUNTS = (("model", "context_length"), ("model", "vocab_size"))
_OPTIONAL_OBJECTS = (("search",), ("model", "decoder", "inputs"), ("model", "decoder", "outputs"))


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


def package_config(folder: Path) -> dict[str, Any]:
    """The package's genai_config.json, checked for what every command reads from it and
    onnxruntime-genai needs (a `model` object with a `type`, a `decoder` object, a positive
    `context_length` and `vocab_size`); InputError naming the file and the key otherwise."""
    file = folder / CONFIG
    config = read_json_object(file, REEXPORT)

    def refuse(keys: tuple[str, ...], wanted: str) -> InputError:
        value, name = _at(config, keys), ".".join(keys)
        said = f"has no {name} ({wanted})" if value is None else f"has {name} {json.dumps(value)[:60]}, not {wanted}"
        return InputError(f"{file} {said}, which onnxruntime-genai needs; {REEXPORT}")

    for keys in _OBJECTS:
        if not isinstance(_at(config, keys), dict):
            raise refuse(keys, "an object")
    model_type = config["model"].get("type")
    if not isinstance(model_type, str) or not model_type:
        raise refuse(("model", "type"), "the genai model type, e.g. llama")
    for keys in _COUNTS:
        value = _at(config, keys)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise refuse(keys, "a positive integer")
    for keys in _OPTIONAL_OBJECTS:
        if _at(config, keys) is not None and not isinstance(_at(config, keys), dict):
            raise refuse(keys, "an object")
    return config


def _at(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def package_folder(path: Path) -> Path:
    """The package folder `path` names, the folder or its genai_config.json (`run`, `eval` and
    `quantize` take either), with its genai_config.json checked (`package_config`)."""
    folder = path.parent if path.name == CONFIG and path.is_file() else path
    check_package_path(folder, files=False)
    return folder


def check_package_path(path: Path, files: bool) -> None:
    """InputError unless `path` is a package folder (with a readable genai_config.json,
    `package_config`), or with `files` its genai_config.json or an .onnx file; the sentence says what
    the path is instead (missing, another file, a release root)."""
    wanted = f"a package folder, its {CONFIG} or an .onnx file" if files else f"a package folder or its {CONFIG}"
    if not path.exists():
        raise InputError(f"{path} does not exist; pass {wanted}")
    if path.is_file():
        if files and path.suffix == ".onnx":
            return
        if files and path.name == CONFIG:
            package_config(path.parent)
            return
        raise InputError(f"{path} is a file, not {wanted}")
    if (path / CONFIG).is_file():
        package_config(path)
        return
    variants = release_variants(path)
    if variants:
        names = ", ".join(variants)
        raise InputError(
            f"{path} is a release of {len(variants)} package(s) ({names}), not one package; "
            f"pass a variant's folder, e.g. {path / variants[0]}"
        )
    raise InputError(f"{path} is not a package folder (no {CONFIG}); pass {wanted}")
