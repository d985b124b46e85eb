"""`build`: one package from one request, in pipeline order.

Resolve the request before any work (phase 1 from the options, then the fetch, then phase 2 from
the config and tensor index: gqa_export/plan/), then run the stages on the plan (gqa_export/stages/:
graphs, package, finish). Every refusal comes from the two phases; the stages refuse nothing of
their own but what a graph or the disk tells them (an op the EP lacks, no space left).
"""

from __future__ import annotations

import time
from pathlib import Path

from gqa_export.plan.model_phase import planned_max_length, resolve_model
from gqa_export.plan.records import BuildPlan
from gqa_export.plan.request_phase import build_inputs, resolve_request
from gqa_export.progress import NullReporter, Reporter
from gqa_export.request.records import BuildOptions
from gqa_export.source.checkpoint import Checkpoint, open_checkpoint
from gqa_export.stages.finish import smoke_json
from gqa_export.stages.graphs import build_graphs
from gqa_export.stages.package import float_reference_request, write_package
from gqa_export.stages.result import BuildResult

__all__ = ["BuildOptions", "BuildResult", "build", "build_inputs", "export", "planned_max_length", "resolve",
           "smoke_json"]  # fmt: skip


def build(opts: BuildOptions, reporter: Reporter | None = None, checkpoint: Checkpoint | None = None) -> BuildResult:
    """Export one package. `checkpoint`: an already opened source (a release's), else `opts.model`."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    if checkpoint is not None:
        return export(*resolve(opts, reporter, checkpoint), reporter, started)
    request = resolve_request(opts, reporter.note)  # before the fetch
    checkpoint = open_checkpoint(opts.model, opts.revision, reporter, opts.gguf_file)
    try:
        return export(resolve_model(request, checkpoint, reporter), checkpoint, reporter, started)
    finally:
        checkpoint.close()  # what reading it wrote (a GGUF's config/tokenizer folder), success or not


def resolve(
    opts: BuildOptions, reporter: Reporter, checkpoint: Checkpoint | None = None, output: bool = True
) -> tuple[BuildPlan, Checkpoint]:
    """Both phases: the options alone, the fetch (unless `checkpoint` is given), the config."""
    request = resolve_request(opts, reporter.note, output)
    checkpoint = checkpoint or open_checkpoint(opts.model, opts.revision, reporter, opts.gguf_file)
    return resolve_model(request, checkpoint, reporter), checkpoint


def export(plan: BuildPlan, checkpoint: Checkpoint, reporter: Reporter, started: float | None = None) -> BuildResult:
    """The stages on a resolved plan: graphs, then the package at the plan's -o."""
    started = time.perf_counter() if started is None else started
    graphs = build_graphs(plan, reporter)
    return write_package(plan, graphs, reporter, started, lambda output: _float_reference(plan, checkpoint, output))


def _float_reference(plan: BuildPlan, checkpoint: Checkpoint, output: Path) -> Path:
    """`--report`'s float reference: the same checkpoint exported in fp32 for CPU at `output`."""
    request = float_reference_request(plan.request, output)
    reference, _ = resolve(request, NullReporter(), checkpoint, output=False)
    return export(reference, checkpoint, NullReporter()).output
