"""`build --draft`: a target package that carries a draft model for speculative decoding.

Runs the one-package pipeline twice (draft first: it is the small one), with full logits for
both, refuses what onnxruntime-genai cannot rewind or verify, then moves the draft's graph into
the target's staging folder, writes the `model.draft` / `speculative` blocks and re-seals the
manifest before the smoke run (docs/speculative.md).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace

from gqa_export.eps import EPS
from gqa_export.errors import InputError, PackageLintError
from gqa_export.jsonio import read_json
from gqa_export.package.draft import (
    SpeculativeOptions,
    attach_draft,
    draft_problems,
    rewind_refusal,
    tokenizer_mismatch,
)
from gqa_export.package.manifest import finalize
from gqa_export.package.ownership import local_inputs
from gqa_export.package.staging import StagedPackage, check_output
from gqa_export.pipeline import BuildOptions, BuildResult, build, build_inputs
from gqa_export.progress import NullReporter, Reporter
from gqa_export.runtime.run import runnable_ep, smoke_run
from gqa_export.source.bnb import is_bitsandbytes
from gqa_export.source.checkpoint import Checkpoint, open_checkpoint

_WINDOW_CACHE = "attention.sliding_window_cache=true"


def check_draft_options(opts: BuildOptions) -> None:
    """The option pairs refused before any export (docs/speculative.md §4)."""
    if EPS[opts.ep].static_window:  # windows run one prompt per call: no multi-token verify step
        raise InputError(f"--draft cannot pair with --ep {opts.ep}: its static-shape windows cannot verify drafts")
    if opts.io.prune_lm_head:
        raise InputError("--draft needs full logits to verify drafted tokens at once; drop --prune-lm-head")
    if opts.attention == "split":
        raise InputError("--draft cannot pair with a decoder pipeline (--attention split); use gqa or bias")
    if any(s.replace(" ", "").lower() == _WINDOW_CACHE for s in opts.settings):
        raise InputError("--draft cannot rewind window-sized KV caches; drop --set attention.sliding_window_cache=true")
    if opts.lora_targets:
        raise InputError("--draft with --lora-targets is not supported (not probed with a draft); drop one")
    if opts.io.no_lm_head or opts.io.inputs_embeds:
        raise InputError(
            "--draft needs packages that read input_ids and give logits: drop --no-lm-head/--inputs-embeds"
        )
    if opts.encoder_precision != "float":  # a target with a draft is a text package (docs/speculative.md §4)
        raise InputError("--draft pairs text packages: drop --encoder-precision")


def build_with_draft(
    opts: BuildOptions,
    draft: str,
    spec: SpeculativeOptions | None = None,
    reporter: Reporter | None = None,
    checkpoint: Checkpoint | None = None,
) -> BuildResult:
    """Export `opts.model` with the draft checkpoint `draft` inside (same EP and precision policy);
    `checkpoint`: the target already opened (a release's one fetch)."""
    started = time.perf_counter()
    reporter = reporter or NullReporter()
    spec = spec or SpeculativeOptions()
    spec.check()
    check_draft_options(opts)
    inputs = [*build_inputs(opts), *local_inputs((draft, "draft model folder"))]
    check_output(opts.output, opts.overwrite, inputs, reporter.note)
    io = replace(opts.io, prune_lm_head=False)
    with StagedPackage(opts.output, opts.overwrite, reporter.note) as staged:
        reporter.stage(f"draft {draft}")
        draft_dir = staged.path / "draft-build"
        # the draft is a text decoder; the target's per-layer quantization patterns name its own layers;
        # an explicit --attention reaches it too, so a recipe that picks split (Gemma-3's image-token
        # runs) can pair as single graphs (docs/speculative.md §4.1)
        # --text-only and --dequantize reach the draft where it has what they act on (else they would
        # each say "no effect" about a draft the user never asked them for)
        draft_checkpoint = open_checkpoint(draft, None, reporter)
        raw = draft_checkpoint.raw_config
        draft_opts = replace(opts, model=draft, output=draft_dir, revision=None, smoke=False, report=False,
                             io=io, recipe=None, settings=(), bidirectional_ids=None,
                             text_only="vision_config" in raw,
                             dequantize=opts.dequantize and is_bitsandbytes(raw.get("quantization_config") or {}),
                             quant=replace(opts.quant, keep_float=(), mixed_precision=()))  # fmt: skip
        build(draft_opts, reporter, draft_checkpoint)
        _refuse(rewind_refusal(draft_dir, "draft"), draft)
        target_dir = staged.path / "target-build"
        target_opts = replace(opts, output=target_dir, overwrite=False, smoke=False, io=io)
        result = build(target_opts, reporter, checkpoint)
        _refuse(rewind_refusal(target_dir, "target"), draft)
        mismatch = tokenizer_mismatch(target_dir, draft_dir)
        if mismatch:
            raise InputError(f"--draft {draft}: {mismatch}; the draft must share the target's tokenizer")
        entry = attach_draft(target_dir, draft_dir, spec)
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
        notes = [*result.notes, f"draft: {entry['layers']} layers from {draft}, up to {spec.max_draft_tokens} tokens"]
        smoke = None
        if opts.smoke:
            ep, note = runnable_ep(staged.path)
            if ep is not None and ep != opts.ep:  # genai 0.18 keeps the draft on its own EP (§4)
                ep, note = None, f"no smoke run: a draft package runs only on {opts.ep}, not on {ep}"
            if note is not None:
                notes.append(note)
                reporter.note(note)
            if ep is not None:
                reporter.stage(f"smoke-run on {ep} (speculative)")
                smoke = smoke_run(staged.path, ep)
        output = staged.commit()
    files = {p.name: p.stat().st_size for p in sorted(output.iterdir()) if p.is_file()}
    seconds = time.perf_counter() - started  # both exports, the pairing and the smoke run
    return replace(result, output=output, files=files, smoke=smoke, notes=notes, seconds=seconds)


def _refuse(reason: str | None, draft: str) -> None:
    if reason:
        raise InputError(f"--draft {draft}: {reason}")
