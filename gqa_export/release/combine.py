"""`gqa-export release assemble SPEC PART... -o ROOT`: a release put together from its parts.

Every check runs before anything is written, cheapest first, and the first problem is refused in
one line naming the part, file or variant (exit 2): each part's sealed part.json; the spec it was
made from (sha256 of the spec's bytes) and the gqa-export version; one source read by all (the Hub
commit or the local folder's content hash), one environment, one eval text, one model card; every
variant of the spec in exactly one part; then every file of every part against its sha256, and
nothing in a part that part.json does not list. The gates are then checked from the parts' scores
(exit 1 when one fails, as on one machine).

The release is staged beside -o and committed like every output (package/staging.py): the variant
files are hard-linked from the parts where the file system allows (else copied; a part's files are
never changed), and the root is written by the function that writes one machine's
(release/root.py), from the parts' records, so with SOURCE_DATE_EPOCH the bytes are the same.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.package.staging import SPEC_FOLDER, StagedPackage, check_output
from gqa_export.progress import NullReporter, Reporter
from gqa_export.release.evaluation import judge, scores_of
from gqa_export.release.parts import PART, Part, file_problems, mismatch, read_part
from gqa_export.release.root import write_root
from gqa_export.release.spec import ReleaseSpec


@dataclass(frozen=True)
class AssembleResult:
    output: Path
    parts: list[Part]
    variants: list[dict[str, Any]]  # release.json's entries
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "parts": [{"part": str(p.folder), "variants": p.paths} for p in self.parts],
            "variants": [{**v, "files": len(v["files"])} for v in self.variants],
            "total_bytes": sum(v["bytes"] for v in self.variants),
            "seconds": round(self.seconds, 3),
        }


def assemble_parts(
    spec: ReleaseSpec, folders: Sequence[Path], output: Path, overwrite: bool = False, reporter: Reporter | None = None
) -> AssembleResult:
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    if not folders:
        raise InputError("release assemble needs the part folders: release assemble SPEC PART... -o ROOT")
    inputs = [(spec.file.parent, SPEC_FOLDER), *((folder, "part") for folder in folders)]
    check_output(output, overwrite, inputs, reporter.note)
    reporter.stage(f"check {len(folders)} part(s)")
    parts = [read_part(folder) for folder in folders]
    _check_records(spec, parts)
    owner = _owners(spec, parts)
    for part in parts:  # the expensive check last: every byte of every part
        reporter.stage(f"hash {part.folder}")
        problems = file_problems(part)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"{problems[0]}{more}; rerun the job that made it")
    first = parts[0]
    entries = {str(v["path"]): (v, owner[str(v["path"])]) for part in parts for v in part.record["variants"]}
    evals: dict[str, dict[str, Any]] = {}
    if spec.eval is not None:
        scores = {path: scores_of(path, s) for part in parts for path, s in part.record["scores"].items()}
        evals = judge(spec, scores, output, where={path: str(owner[path].folder) for path in owner})
    with StagedPackage(output, overwrite, reporter.note) as staged:
        released = []
        for variant in spec.variants:
            entry, part = entries[variant.path]
            reporter.stage(f"{variant.path} from {part.folder}")
            _place(part.folder / variant.path, staged.path / variant.path, entry["files"])
            released.append({**entry, "eval": evals.get(variant.path)})
        reporter.stage("model card and release.json")
        write_root(staged.path, first.card, released, spec.eval is not None, first.folder, first.record["source"],
                   first.record["eval"], first.environment)  # fmt: skip
        committed = staged.commit()
    return AssembleResult(committed, parts, released, time.perf_counter() - started)


def _check_records(spec: ReleaseSpec, parts: list[Part]) -> None:
    """Every part from this spec and gqa-export, and all of one source, environment, eval and card."""
    for part in parts:
        problem = mismatch(part, spec)
        if problem:
            raise InputError(problem)
    first = parts[0]
    for part in parts[1:]:
        for key, what, fix in _SHARED:
            if part.record.get(key) != first.record.get(key):
                raise InputError(
                    f"part {part.folder} {what} than part {first.folder} ({_difference(part, first, key)}); {fix}"
                )
        if part.environment != first.environment:
            raise InputError(
                f"part {part.folder} was made with other versions than part {first.folder} "
                f"({_difference(part, first, 'dependencies', 'python')}); install the same versions on every runner"
            )
    if spec.eval is not None and first.record.get("eval") is not None:
        from gqa_export.package.manifest import sha256_file

        if first.record["eval"].get("text_sha256") != sha256_file(spec.eval.text):
            raise InputError(
                f"part {first.folder} was evaluated on another text than {spec.file.name}'s eval.text "
                f"({spec.eval.text.name}); use one eval text for every job"
            )


_SHARED = (
    ("source", "read another source", "give every job the same --revision (release --list resolves it)"),
    ("pin", "read other source files", "give every job the same --revision, or the same local checkpoint"),
    ("eval", "was evaluated on another text or window", "use one eval text for every job"),
    ("card", "read another model card", "give every job the same source"),
)


def _difference(part: Part, other: Part, *keys: str) -> str:
    """The first value that differs, as `key.sub: a vs b`."""
    for key in keys:
        mine, theirs = part.record.get(key), other.record.get(key)
        if isinstance(mine, dict) and isinstance(theirs, dict):
            for sub in sorted(set(mine) | set(theirs)):
                if mine.get(sub) != theirs.get(sub):
                    return f"{key}.{sub}: {mine.get(sub)!r} vs {theirs.get(sub)!r}"
        elif mine != theirs:
            return f"{key}: {mine!r} vs {theirs!r}"
    return "records differ"


def _owners(spec: ReleaseSpec, parts: list[Part]) -> dict[str, Part]:
    """The part of every variant: none unknown to the spec, none in two parts, none missing."""
    known = {v.path for v in spec.variants}
    owner: dict[str, Part] = {}
    for part in parts:
        for path in part.paths:
            if path not in known:
                raise InputError(
                    f"part {part.folder} holds variant {path}, which {spec.file.name} does not list; "
                    "rebuild it from this spec"
                )
            if path in owner:
                raise InputError(f"variant {path} is in two parts, {owner[path].folder} and {part.folder}; pass one")
            owner[path] = part
    missing = [v.path for v in spec.variants if v.path not in owner]
    if missing:
        raise InputError(
            f"no part holds variant {missing[0]}"
            + (f" (nor {', '.join(missing[1:])})" if missing[1:] else "")
            + f": make it with `release {spec.file.name} --variant {missing[0]} -o PART` and pass that part"
        )
    return owner


def _place(source: Path, target: Path, files: dict[str, Any]) -> None:
    """The variant's files into the staged release: a hard link where the file system allows (the
    parts' bytes, checked above, shared), else a copy."""
    target.mkdir(parents=True, exist_ok=True)
    for name in files:
        try:
            os.link(source / name, target / name)
        except OSError:
            shutil.copyfile(source / name, target / name)


__all__ = ["PART", "AssembleResult", "assemble_parts"]
