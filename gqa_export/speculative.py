"""`build --draft`: a target package that carries a draft model for speculative decoding.

Both models are resolved first (the target's options, the draft's fetch and config, the target's
fetch and config) and their pairing is checked on the plans (plan/draft.py): nothing is exported
before every refusal. Then the draft (the small one) and the target are exported with full logits
into the pairing's staging folder, the draft's graph moves into the target's package, the
`model.draft` / `speculative` blocks are written and the manifest re-sealed before the smoke run
(docs/speculative.md).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

from gqa_export.arch.wrapped_decoders import carries_towers
from gqa_export.errors import InputError, PackageLintError
from gqa_export.jsonio import read_json
from gqa_export.package.draft import attach_draft, draft_problems, rewind_refusal, tokenizer_mismatch
from gqa_export.package.manifest import finalize
from gqa_export.package.staging import StagedPackage
from gqa_export.pipeline import BuildOptions, BuildResult, export
from gqa_export.plan.draft import draft_request, ids_mismatch, target_request
from gqa_export.plan.draft import rewind_refusal as plan_rewind_refusal
from gqa_export.plan.model_phase import resolve_model
from gqa_export.plan.records import BuildPlan, RequestPlan
from gqa_export.plan.request_phase import check_draft_options, resolve_request
from gqa_export.progress import NullReporter, Reporter
from gqa_export.request.records import SpeculativeOptions
from gqa_export.runtime.providers import runnable_ep
from gqa_export.runtime.run import GenerationResult, smoke_run
from gqa_export.source.bnb import is_bitsandbytes
from gqa_export.source.checkpoint import Checkpoint, open_checkpoint

__all__ = ["Pair", "build_with_draft", "check_draft_options", "resolve_pair", "retarget"]
# a resolved pairing: the target's plan, the draft's, and their opened checkpoints (target, draft)
Pair = tuple[BuildPlan, BuildPlan, tuple[Checkpoint, Checkpoint]]


def build_with_draft(
    opts: BuildOptions,
    draft: str | None = None,
    spec: SpeculativeOptions | None = None,
    reporter: Reporter | None = None,
    checkpoint: Checkpoint | None = None,
    resolved: Pair | None = None,
) -> BuildResult:
    """Export `opts.model` with the draft checkpoint `opts.draft` (or `draft`) inside, same EP and
    precision policy; `checkpoint`: the target already opened (a release's one fetch). Both models
    are resolved (phase 1, fetch, phase 2) and their pairing checked before either is exported
    (`resolved`: already done, by a release before its first variant)."""
    started = time.perf_counter()
    reporter = reporter or NullReporter()
    opts = replace(opts, draft=draft or opts.draft, speculative=spec or opts.speculative)
    target_plan, draft_plan, checkpoints = resolved or resolve_pair(opts, reporter, checkpoint)
    # the draft is always ours to close (a release resolves it for this variant alone); the target only if opened here
    opened = (checkpoints[1],) if resolved or checkpoint is not None else checkpoints
    try:
        with StagedPackage(opts.output, opts.overwrite, reporter.note) as staged:
            reporter.stage(f"draft {opts.draft}")
            draft_dir, target_dir = staged.path / "draft-build", staged.path / "target-build"
            export(retarget(draft_plan, draft_dir), checkpoints[1], reporter)
            _refuse(rewind_refusal(draft_dir, "draft"), str(opts.draft))  # the written packages, as a net
            result = export(retarget(target_plan, target_dir), checkpoints[0], reporter, started)
            _refuse(rewind_refusal(target_dir, "target"), str(opts.draft))
            mismatch = tokenizer_mismatch(target_dir, draft_dir)
            if mismatch:
                raise InputError(f"--draft {opts.draft}: {mismatch}; the draft must share the target's tokenizer")
            entry = attach_draft(target_dir, draft_dir, opts.speculative)
            for item in target_dir.iterdir():
                shutil.move(str(item), str(staged.path / item.name))
            shutil.rmtree(target_dir)
            shutil.rmtree(draft_dir)
            manifest = read_json(staged.path / "manifest.json") or {}
            manifest.pop("digest", None)
            manifest["options"]["draft"] = entry
            finalize(staged.path, manifest)
            problems = draft_problems(staged.path)
            if problems:  # a bug in gqa-export, never the input
                raise PackageLintError(f"the draft pairing is inconsistent: {problems[0]}")
            tokens = opts.speculative.max_draft_tokens
            notes = [*result.notes, f"draft: {entry['layers']} layers from {opts.draft}, up to {tokens} tokens"]
            smoke = _smoke(staged.path, opts, notes, reporter)
            output = staged.commit()
    finally:
        for each in opened:  # what reading them wrote (a GGUF's config/tokenizer folder)
            each.close()
    files = {p.name: p.stat().st_size for p in sorted(output.iterdir()) if p.is_file()}
    seconds = time.perf_counter() - started  # both exports, the pairing and the smoke run
    return replace(result, output=output, files=files, smoke=smoke, notes=notes, seconds=seconds)


def resolve_pair(
    opts: BuildOptions, reporter: Reporter, checkpoint: Checkpoint | None = None, output: bool = True
) -> Pair:
    """Target and draft through both phases, and their pairing: every refusal before any export.
    --text-only and --dequantize reach the draft where it has what they act on (else they would
    each say "no effect" about a draft the user never asked them for)."""
    target_request = resolve_request(opts, reporter.note, output)  # the draft's option pairs included
    draft_checkpoint = open_checkpoint(str(opts.draft), None, reporter)
    try:
        return _resolve_pair(opts, target_request, draft_checkpoint, reporter, checkpoint)
    except BaseException:
        draft_checkpoint.close()
        raise


def _resolve_pair(
    opts: BuildOptions, target_request: RequestPlan, draft_checkpoint: Checkpoint, reporter: Reporter,
    checkpoint: Checkpoint | None,
) -> Pair:  # fmt: skip
    raw = draft_checkpoint.raw_config
    draft_opts = replace(
        draft_request(opts, opts.output / "draft-build"), text_only=carries_towers(raw),
        dequantize=opts.dequantize and is_bitsandbytes(raw.get("quantization_config") or {}),
    )  # fmt: skip
    draft_plan = resolve_model(resolve_request(draft_opts, output=False), draft_checkpoint, reporter)
    checkpoint = checkpoint or open_checkpoint(opts.model, opts.revision, reporter, opts.gguf_file)
    target_opts = _target(target_request, opts.output / "target-build")
    target_plan = resolve_model(target_opts, checkpoint, reporter)
    for plan, role in ((draft_plan, "draft"), (target_plan, "target")):
        _refuse(plan_rewind_refusal(plan, role), str(opts.draft))
    mismatch = ids_mismatch(target_plan, draft_plan)
    if mismatch:
        raise InputError(f"--draft {opts.draft}: {mismatch}; the draft must share the target's tokenizer")
    return target_plan, draft_plan, (checkpoint, draft_checkpoint)


def _target(plan: RequestPlan, output: Path) -> RequestPlan:
    return replace(plan, request=target_request(plan.request, output))


def retarget(plan: BuildPlan, output: Path) -> BuildPlan:
    """The plan exporting into `output` (a folder inside the pairing's staging folder)."""
    return replace(plan, request=replace(plan.request, output=output))


def _smoke(folder: Path, opts: BuildOptions, notes: list[str], reporter: Reporter) -> GenerationResult | None:
    """The pair's smoke run, on the package's own EP where this machine has it (genai 0.18 keeps the
    draft on its own EP, docs/speculative.md §4)."""
    if not opts.smoke:
        return None
    ep, note = runnable_ep(folder)
    if ep is not None and ep != opts.ep:
        ep, note = None, f"no smoke run: a draft package runs only on {opts.ep}, not on {ep}"
    if note is not None:
        notes.append(note)
        reporter.note(note)
    if ep is None:
        return None
    reporter.stage(f"smoke-run on {ep} (speculative)")
    return smoke_run(folder, ep)


def _refuse(reason: str | None, draft: str) -> None:
    if reason:
        raise InputError(f"--draft {draft}: {reason}")
