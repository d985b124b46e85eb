"""The tail every command that writes a package shares: stream the weights, seal, lint, smoke-run.

`build`, `quantize` and each variant of a `release` end the same way, inside their staging folder:
the graphs' weights are streamed into one data file and hashed as written (writer.py), the
manifest lists and seals every file, the package is read back and linted as `inspect` would (an
error is a bug in gqa-export and fails the command; warnings become notes), and, when asked, it is
loaded by onnxruntime-genai on the EP this machine can run it on and generates a few tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx_ir as ir

from gqa_export.check.lints import check_written
from gqa_export.package.manifest import finalize
from gqa_export.package.writer import WrittenFile, external_values, save_models
from gqa_export.progress import Reporter
from gqa_export.runtime.providers import runnable_ep
from gqa_export.runtime.run import GenerationResult, smoke_run


def stream_weights(
    folder: Path, graphs: list[tuple[str, ir.Model]], data_file: str, reporter: Reporter
) -> dict[str, WrittenFile]:
    """Every graph saved into `folder`, their external weights streamed into `data_file`."""
    count = len(external_values(graphs[0][1]))
    with reporter.task(f"streaming weights into {data_file}", count) as advance:
        return save_models(graphs, folder, data_file, lambda: advance(1))


def seal_lint_smoke(
    folder: Path,
    manifest: dict[str, Any],
    written: dict[str, WrittenFile],
    notes: list[str],
    reporter: Reporter,
    smoke: bool,
    source_dir: Path | None = None,
) -> GenerationResult | None:
    """Hash every file and seal the manifest, lint the package (warnings become notes), then the
    smoke run when `smoke`; returns its result (None when not run, with the reason in `notes`)."""
    finalize(folder, manifest, written)  # every file hashed, then the manifest written last
    for finding in check_written(folder, source_dir):
        notes.append(f"{finding.id}: {finding.message}")
        reporter.note(notes[-1])
    if not smoke:
        return None
    ep, note = runnable_ep(folder)
    if note is not None:
        notes.append(note if ep is not None else f"{note}: smoke run skipped")
        reporter.note(notes[-1])
    if ep is None:
        return None
    reporter.stage(f"smoke-run on {ep}")
    return smoke_run(folder, ep)


def smoke_json(smoke: GenerationResult | None) -> dict[str, Any] | None:
    """The smoke run as `build --json` and `quantize --json` both print it (null: not run)."""
    if smoke is None:
        return None
    return {
        "ep": smoke.ep,
        "new_tokens": len(smoke.tokens),
        "prefill_ms": round(smoke.prefill_ms, 3),
        "tokens_per_s": round(smoke.decode_tokens_per_s, 2),
        "text": smoke.text,
    }
