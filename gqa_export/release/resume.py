"""`release SPEC --resume -o PARTS`: a folder of parts, one per variant, made where missing.

A variant counts as done when a part in PARTS holds it and that part verifies: sealed part.json,
made from this spec by this gqa-export, from the same source (commit or content hash), every file
as listed and nothing else. Every other variant is exported into its own part, `PARTS/part-<path
with / as __>` (the `artifact` name `release --list` gives, which the workflow uploads it under),
one after another from one fetch; a part of ours that is there and does not verify is replaced,
anything else there is refused. A job killed mid-way leaves only its staging folder, which the
next run removes (package/swap.py), so rerunning the same command exports the variants that did
not finish and nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.package.staging import check_output
from gqa_export.progress import NullReporter, Reporter
from gqa_export.release.assemble import ReleaseResult, release_into, spec_inputs
from gqa_export.release.parts import PART, Part, file_problems, mismatch, part_name, read_part, source_pin
from gqa_export.release.spec import ReleaseSpec, Variant
from gqa_export.runtime.evaluate import read_text
from gqa_export.source.checkpoint import open_checkpoint


@dataclass(frozen=True)
class ResumeResult:
    output: Path
    skipped: dict[str, Path]  # variant path -> the part that already holds it
    made: list[ReleaseResult]
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "skipped": {path: str(folder) for path, folder in self.skipped.items()},
            "parts": [r.as_json() for r in self.made],
            "seconds": round(self.seconds, 3),
        }


def resume(
    spec: ReleaseSpec,
    folder: Path,
    wanted: tuple[Variant, ...],
    reporter: Reporter | None = None,
    revision: str | None = None,
) -> ResumeResult:
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--resume -o {folder} is a file; choose the folder of parts")
    text = read_text(spec.eval.text) if spec.eval else None
    checkpoint = open_checkpoint(spec.source, revision or spec.revision, reporter, spec.gguf_file)
    try:
        pin = source_pin(checkpoint.source)
        done = _verified(spec, folder, pin, reporter) if folder.is_dir() else {}
        todo = [v for v in wanted if v.path not in done]
        for variant in todo:  # every part's -o checked before the first export
            check_output(folder / part_name(variant.path), True, spec_inputs(spec), reporter.note)
        for path in (v.path for v in wanted if v.path in done):
            reporter.note(f"{path}: its part {done[path]} verifies; skipped")
        made = []
        for variant in todo:
            output = folder / part_name(variant.path)
            reporter.stage(f"part {output}")
            made.append(release_into(spec, output, True, reporter, text, checkpoint, (variant,), pin))
    finally:
        checkpoint.close()
    skipped = {v.path: done[v.path] for v in wanted if v.path in done}
    return ResumeResult(folder, skipped, made, time.perf_counter() - started)


def _verified(spec: ReleaseSpec, folder: Path, pin: dict[str, Any], reporter: Reporter) -> dict[str, Path]:
    """The variants that a part in `folder` holds and that part verifies (spec, tool, source, files)."""
    done: dict[str, Path] = {}
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and (p / PART).is_file()):
        why = _why_not(spec, child, pin)
        if why is not None:
            reporter.note(f"{child}: {why}; its variants are made again")
            continue
        for path in read_part(child).paths:
            done.setdefault(path, child)
    return done


def _why_not(spec: ReleaseSpec, child: Path, pin: dict[str, Any]) -> str | None:
    try:
        part: Part = read_part(child)
    except InputError as exc:
        return str(exc)
    problem = mismatch(part, spec)
    if problem is not None:
        return problem
    if part.record.get("pin") != pin:
        return "it read other source files"
    problems = file_problems(part)
    return problems[0] if problems else None
