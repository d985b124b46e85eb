"""Parts of a release: some of a spec's variants exported on one machine (one CI job), with a record
that lets `release assemble` check them and put the release together without the source.

A part is a folder: the variants' package folders at their release paths, the source's license
files, and `part.json`, sealed like release.json (package/manifest.py), which records

- `spec`: the spec file's name and sha256 (its bytes: every part of a release is made from one spec);
- `source`: release.json's source entry, and `pin`: what was read, a Hub commit (a branch or tag
  resolved once, `release --list` or `--revision`) or a local folder's content hash (every file's
  sha256), so parts that read different weights are refused;
- `tool`, `created` and the environment (the versions that shape the bytes);
- `card`: the model card's facts from the source's README, so assembling needs no source;
- `variants`: release.json's entries of its variants (every file's sha256), `files`: its root files;
- `eval` and `scores`: the tokens, window and per-position scores of its variants, from which
  assembling compares each with its reference and checks the gates exactly as one machine does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.package.manifest import (
    created_at,
    environment_entry,
    sealed_problems,
    sha256_file,
    source_entry,
    tool_entry,
    write_sealed,
)
from gqa_export.package.staging import file_digests
from gqa_export.release.card import CardInfo, copy_license_files
from gqa_export.release.evaluation import scores_record
from gqa_export.release.spec import ReleaseSpec, Variant
from gqa_export.runtime.evaluate import Scores
from gqa_export.runtime.verify import PART, listed_problems
from gqa_export.source.fetch import Source

PART_FORMAT = "gqa-export-release-part/1"
SEPARATOR = "__"  # a variant's path as one folder or CI artifact name: cuda/cuda-fp16 -> part-cuda__cuda-fp16


def part_name(path: str) -> str:
    """A variant's part as a folder or artifact name (GitHub artifact names cannot hold '/'): the
    workflow uploads each part under it, so the assemble job's parts/ is the folder `--resume` fills."""
    return "part-" + path.replace("/", SEPARATOR)


def select(spec: ReleaseSpec, names: Sequence[str]) -> tuple[Variant, ...]:
    """The variants `--variant` names (each a variant's path, or its part name), in the spec's
    order; an unknown or repeated name is refused, listing the spec's variants."""
    by_name = {v.path: v for v in spec.variants} | {part_name(v.path): v for v in spec.variants}
    chosen: list[str] = []
    for name in names:
        variant = by_name.get(name.strip("/"))
        if variant is None:
            known = ", ".join(v.path for v in spec.variants)
            raise InputError(f"--variant {name}: {spec.file.name} has no such variant; its variants are: {known}")
        if variant.path in chosen:
            raise InputError(f"--variant {name} is given twice; name each variant once")
        chosen.append(variant.path)
    return tuple(v for v in spec.variants if v.path in chosen)


def spec_sha256(spec: ReleaseSpec) -> str:
    return sha256_file(spec.file)


def source_pin(source: Source) -> dict[str, Any]:
    """What the export read: the Hub commit, or the local checkpoint's content hash (one sha256
    over every file's relative name and sha256; a GGUF source: its file parts)."""
    if not source.is_local:
        return {"revision": source.revision}
    if source.gguf is not None:
        files = [(p.name, p) for p in source.gguf.files]
    else:
        root = source.model_dir
        found = sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p.relative_to(root)))
        files = [(p.relative_to(root).as_posix(), p) for p in found]
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(f"{name}\0{sha256_file(path)}\n".encode())
    return {"content_sha256": digest.hexdigest(), "files": len(files)}


def _hidden(relative: Path) -> bool:
    """.git, .cache and the like: not the checkpoint."""
    return any(part.startswith(".") for part in relative.parts)


def write_part(
    root: Path,
    spec: ReleaseSpec,
    source: Source,
    pin: dict[str, Any],
    info: CardInfo,
    entries: list[dict[str, Any]],
    scores: dict[str, Scores],
    measured: dict[str, Any] | None,
) -> None:
    """The license files and the sealed part.json, written last."""
    copy_license_files(source.model_dir, root)
    document = {
        "format": PART_FORMAT,
        "tool": tool_entry(),
        "created": created_at(),
        "spec": {"file": spec.file.name, "sha256": spec_sha256(spec)},
        "source": source_entry(source),
        "pin": pin,
        "card": asdict(info),
        "eval": measured,
        "variants": entries,
        "scores": {path: scores_record(scored) for path, scored in scores.items()},
        "files": {name: entry for name, entry in file_digests(root).items() if name != PART},
        **environment_entry(),
    }
    write_sealed(root / PART, document)


@dataclass(frozen=True)
class Part:
    folder: Path
    record: dict[str, Any]

    @property
    def paths(self) -> list[str]:
        return [str(v["path"]) for v in self.record["variants"]]

    @property
    def environment(self) -> dict[str, Any]:
        return {"dependencies": self.record.get("dependencies"), "python": self.record.get("python")}

    @property
    def card(self) -> CardInfo:
        card = dict(self.record["card"])
        return CardInfo(**{**card, "tags": tuple(card["tags"])})


def read_part(folder: Path) -> Part:
    """A part's sealed record (its files are checked by `file_problems`); InputError naming the
    folder and what is wrong."""
    if not folder.is_dir():
        raise InputError(f"part {folder} is not a folder; pass the folders `release SPEC --variant ... -o PART` wrote")
    if not (folder / PART).is_file():
        raise InputError(
            f"part {folder} holds no {PART}: it is not a part of a release (made by `release SPEC --variant ... -o "
            "PART`), or its export did not finish; rerun that job"
        )
    record, problems = sealed_problems(folder / PART)
    if problems or record is None:
        raise InputError(f"part {folder}: {problems[0]}; rerun that job")
    if record.get("format") != PART_FORMAT:
        raise InputError(f"part {folder}: {PART} is format {record.get('format')!r}, not {PART_FORMAT}; rerun that job")
    return Part(folder, record)


def mismatch(part: Part, spec: ReleaseSpec) -> str | None:
    """Why `part` was not made from `spec` by this gqa-export (None when it was)."""
    made = part.record["spec"]
    if made.get("sha256") != spec_sha256(spec):
        theirs, ours = str(made.get("sha256"))[:12], spec_sha256(spec)[:12]
        return (
            f"part {part.folder} was made from another spec ({made.get('file')}, sha256 {theirs}…; "
            f"{spec.file.name} is {ours}…): rebuild it from this spec"
        )
    version, ours = part.record["tool"].get("version"), tool_entry()["version"]
    if version != ours:
        return f"part {part.folder} was made by gqa-export {version}, this is {ours}: make every part with one version"
    return None


def file_problems(part: Part) -> list[str]:
    """Changed, missing and unlisted files of a part, each named inside it."""
    return [f"part {part.folder}: {problem}" for problem in listed_problems(part.folder, PART)]
