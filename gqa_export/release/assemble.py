"""`gqa-export release`: every variant of a spec from one fetch, all or nothing.

The checkpoint is fetched and opened once (`source.checkpoint.Checkpoint`): one config parse, one set of
memory-mapped shards whose pages every variant reads again from memory. Variants are exported one
after another, so peak memory is the largest single variant's, not the sum; reading a tensor from
the mapped shards is a few percent of a variant's export (benchmarks/results/release.md), which is
why weights are not held to fan them out to several variants at once.

Everything is written into a hidden staging folder next to `-o` and renamed into place only when
every variant exported, passed its lints and smoke run, and met its perplexity gate; any failure
(or Ctrl-C) removes it, so the output root never holds half a release.

`--variant` exports some of the variants into a part instead (release/parts.py): the same plans
(every variant of the spec is resolved before the first export, so a part refuses what the whole
release would), the same staging, and part.json instead of the model card and release.json;
`release assemble` (release/combine.py) puts the parts together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gqa_export.errors import GqaExportError, InputError
from gqa_export.package.manifest import MANIFEST, environment_entry, sealed_problems, sha256_file, source_entry
from gqa_export.package.ownership import local_inputs
from gqa_export.package.staging import SPEC_FOLDER, StagedPackage, check_output, check_outside
from gqa_export.pipeline import BuildResult, export, planned_max_length, resolve
from gqa_export.plan.records import BuildPlan
from gqa_export.progress import NullReporter, PrefixedReporter, Reporter
from gqa_export.release.card import card_info
from gqa_export.release.evaluation import ReleaseError, judge, score_variants
from gqa_export.release.parts import source_pin, write_part
from gqa_export.release.root import write_root
from gqa_export.release.spec import ReleaseSpec, Variant
from gqa_export.runtime.evaluate import Scores, read_text
from gqa_export.source.checkpoint import Checkpoint, open_checkpoint, source_dims
from gqa_export.speculative import Pair, build_with_draft, resolve_pair, retarget

Resolved = BuildPlan | Pair  # a variant's plan, or a draft variant's pair

__all__ = ["ReleaseError", "ReleaseResult", "release", "release_into", "spec_inputs"]


@dataclass(frozen=True)
class ReleaseResult:
    output: Path
    builds: list[BuildResult]
    variants: list[dict[str, Any]]  # release.json's entries
    seconds: float

    def as_json(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "variants": [
                {**v, "files": len(v["files"]), "seconds": round(b.seconds, 3), **_smoke(b)}
                for v, b in zip(self.variants, self.builds, strict=True)
            ],
            "total_bytes": sum(v["bytes"] for v in self.variants),
            "seconds": round(self.seconds, 3),
        }


def spec_inputs(spec: ReleaseSpec) -> list[tuple[Path, str]]:
    """Everything the spec names that -o must stay clear of: its folder, the source, recipe, eval
    text, drafts, adapters."""
    source = "GGUF file" if Path(spec.source).expanduser().is_file() else "model folder"
    named: list[tuple[str | Path | None, str]] = [(spec.source, source)]
    named.append((spec.eval.text if spec.eval else None, "eval text"))
    for variant in spec.variants:
        named += [(variant.options.recipe, "recipe"), (variant.draft, "draft model folder")]
        named += [(variant.options.kv.calibration, "KV text file")]
        named += [(folder, "PEFT adapter folder") for folder in variant.adapters]
    return [(spec.file.parent, SPEC_FOLDER), *local_inputs(*named)]


def release(
    spec: ReleaseSpec,
    output: Path,
    overwrite: bool = False,
    reporter: Reporter | None = None,
    only: tuple[Variant, ...] | None = None,
    revision: str | None = None,
) -> ReleaseResult:
    """The release at `output`; with `only`, those variants as a part of it (part.json). `revision`
    replaces the spec's (a CI matrix gives every job the commit its list job resolved)."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    check_output(output, overwrite, spec_inputs(spec), reporter.note)
    text = read_text(spec.eval.text) if spec.eval else None
    checkpoint = open_checkpoint(spec.source, revision or spec.revision, reporter, spec.gguf_file)
    try:
        pin = source_pin(checkpoint.source) if only is not None else None
        return release_into(spec, output, overwrite, reporter, text, checkpoint, only, pin, started)
    finally:
        checkpoint.close()  # what reading the source wrote (a GGUF's config/tokenizer folder)


def release_into(
    spec: ReleaseSpec,
    output: Path,
    overwrite: bool,
    reporter: Reporter,
    text: str | None,
    checkpoint: Checkpoint,
    only: tuple[Variant, ...] | None = None,
    pin: dict[str, Any] | None = None,
    started: float | None = None,
) -> ReleaseResult:
    """The release (or, with `only` and the source's `pin`, the part) at `output` from an open
    checkpoint: -o was checked by the caller."""
    started = time.perf_counter() if started is None else started
    source = checkpoint.source
    check_outside(output, source.model_dir)
    _check_lengths(spec, source.model_dir)
    info = card_info(
        source.model_dir, source.source_id, source.is_local, spec.license, spec.base_model, spec.name, spec.tags,
        spec.file, spec.repo,
    )  # fmt: skip
    plans = {
        variant.path: _resolve(variant, i, len(spec.variants), checkpoint, reporter, output)
        for i, variant in enumerate(spec.variants)
    }  # every variant's, a part's too: it refuses what the whole release would, before any export
    here = spec.variants if only is None else only
    total = len(here)
    with StagedPackage(output, overwrite, reporter.note) as staged:
        builds = [
            _build_variant(variant, plans[variant.path], i, total, staged.path, checkpoint, reporter, output)
            for i, variant in enumerate(here)
        ]
        scores: dict[str, Scores] = {}
        measured, evals = None, {}
        if text is not None:
            lengths = {path: _max_length(plan) for path, plan in plans.items()}
            scores, measured = score_variants(spec, text, staged.path, here, lengths, reporter, output)
            if only is None:
                evals = judge(spec, scores, output)
            else:  # the gates whose reference is here: the rest are checked when the parts are assembled
                judge(_within(spec, here), scores, output)
        entries = [_entry(staged.path, v, b, evals.get(v.path)) for v, b in zip(here, builds, strict=True)]
        if only is None:
            reporter.stage("model card and release.json")
            write_root(staged.path, info, entries, spec.eval is not None, source.model_dir, source_entry(source),
                       measured, environment_entry())  # fmt: skip
        else:
            assert pin is not None
            reporter.stage("part.json")
            write_part(staged.path, spec, source, pin, info, entries, scores, measured)
        committed = staged.commit()
    return ReleaseResult(committed, builds, entries, time.perf_counter() - started)


def _within(spec: ReleaseSpec, here: tuple[Variant, ...]) -> ReleaseSpec:
    """`spec` with only the variants here, and only the gates whose reference is here too."""
    paths = {v.path for v in here}
    kept = tuple(v if v.reference in paths else replace(v, gate=None, reference=None) for v in here)
    return replace(spec, variants=kept)


def _max_length(plan: Resolved) -> int:
    return plan[0].max_length if isinstance(plan, tuple) else plan.max_length


def _resolve(
    variant: Variant, index: int, total: int, checkpoint: Checkpoint, reporter: Reporter, output: Path
) -> Resolved:
    """Both phases of one variant (a draft variant: both models and their pairing) before any
    variant is exported: a refusal names the variant and leaves nothing written."""
    prefixed = PrefixedReporter(reporter, f"[{index + 1}/{total} {variant.path}]")
    options = replace(variant.options, output=output / variant.path)
    try:
        if variant.draft:
            options = replace(options, draft=variant.draft, speculative=variant.speculative)
            return resolve_pair(options, prefixed, checkpoint, output=False)
        return resolve(options, prefixed, checkpoint, output=False)[0]
    except GqaExportError as exc:
        raise InputError(f"variant {variant.path} failed: {exc} (nothing was written to {output})") from exc


def _build_variant(
    variant: Variant, plan: Resolved, index: int, total: int, root: Path, checkpoint: Checkpoint, reporter: Reporter,
    output: Path,
) -> BuildResult:  # fmt: skip
    prefixed = PrefixedReporter(reporter, f"[{index + 1}/{total} {variant.path}]")
    try:
        folder = root / variant.path
        if isinstance(plan, tuple):  # a draft pair, resolved before any variant was exported
            options = replace(variant.options, output=folder, draft=variant.draft, speculative=variant.speculative)
            return build_with_draft(options, reporter=prefixed, checkpoint=checkpoint, resolved=plan)
        result = export(retarget(plan, folder), checkpoint, prefixed)
        if variant.adapters:  # LoRA adapters beside their base, in its re-sealed manifest (docs/lora.md §8)
            from gqa_export.release.adapters import ship_adapters

            prefixed.stage(f"{len(variant.adapters)} LoRA adapter(s)")
            ship_adapters(folder, variant.adapters)
        return result
    except GqaExportError as exc:
        kind = InputError if isinstance(exc, InputError) else ReleaseError
        raise kind(f"variant {variant.path} failed: {exc} (nothing was written to {output})") from exc


def _check_lengths(spec: ReleaseSpec, model_dir: Path) -> None:
    """Every variant's max_length against the model's context length, and eval.window against
    every variant's max_length, before any variant is exported, each naming the spec's line (the
    spec's other values were checked when it was read)."""
    window = spec.eval.window if spec.eval is not None else None
    dims = {recipe: source_dims(model_dir, recipe) for recipe in {v.options.recipe for v in spec.variants}}
    for variant in spec.variants:
        try:
            limit = planned_max_length(variant.options.max_length, dims[variant.options.recipe])
        except InputError:  # its sentence names --max-length, the build's option
            context = dims[variant.options.recipe].context_length
            raise InputError(
                f"{variant.where}: max_length {variant.options.max_length} exceeds the model's context length "
                f"{context}; lower it to {context} or less"
            ) from None
        if spec.eval is not None and window is not None and window > limit:
            raise InputError(
                f"{spec.eval.where}.window {window} exceeds variant {variant.path}'s max_length {limit}: "
                "lower eval.window, or raise that variant's max_length"
            )


def _entry(root: Path, variant: Variant, result: BuildResult, evaluation: dict[str, Any] | None) -> dict[str, Any]:
    """release.json's record of one variant: its options and every file with its hash."""
    folder = root / variant.path
    manifest, problems = sealed_problems(folder / MANIFEST)
    assert manifest is not None and not problems, problems
    # the build hashed every file as it wrote the manifest: only the manifest itself is new here
    files = dict(manifest["files"])
    files[MANIFEST] = {"sha256": sha256_file(folder / MANIFEST), "bytes": (folder / MANIFEST).stat().st_size}
    return {
        "path": variant.path,
        "ep": result.ep,
        "precision": result.precision,
        "attention": result.attention_mode,
        "max_length": result.max_length,
        "quantization": manifest["options"].get("quantization"),
        "bytes": sum(f["bytes"] for f in files.values()),
        "files": dict(sorted(files.items())),
        "eval": evaluation,
        "gate": None
        if variant.gate is None
        else {"max_ppl_increase_pct": variant.gate.max_ppl_increase, "against": variant.reference},
        **({"adapters": sorted(manifest["adapters"])} if manifest.get("adapters") else {}),
    }


def _smoke(result: BuildResult) -> dict[str, Any]:
    if result.smoke is None:
        return {"smoke": None}
    return {"smoke": {"ep": result.smoke.ep, "tokens_per_s": round(result.smoke.decode_tokens_per_s, 2)}}
