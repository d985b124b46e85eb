"""`gqa-export release`: every variant of a spec from one fetch, all or nothing.

The checkpoint is fetched and opened once (`source.checkpoint.Checkpoint`): one config parse, one set of
memory-mapped shards whose pages every variant reads again from memory. Variants are exported one
after another, so peak memory is the largest single variant's, not the sum; reading a tensor from
the mapped shards is a few percent of a variant's export (benchmarks/results/release.md), which is
why weights are not held to fan them out to several variants at once.

Everything is written into a hidden staging folder next to `-o` and renamed into place only when
every variant exported, passed its lints and smoke run, and met its perplexity gate; any failure
(or Ctrl-C) removes it, so the output root never holds half a release.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gqa_export.errors import GqaExportError, InputError
from gqa_export.package.manifest import (
    MANIFEST,
    created_at,
    environment_entry,
    sealed_problems,
    sha256_file,
    source_entry,
    tool_entry,
    write_sealed,
)
from gqa_export.package.ownership import local_inputs
from gqa_export.package.staging import SPEC_FOLDER, StagedPackage, check_output, check_outside, file_digests
from gqa_export.pipeline import BuildResult, export, planned_max_length, resolve
from gqa_export.plan.records import BuildPlan
from gqa_export.progress import NullReporter, PrefixedReporter, Reporter
from gqa_export.release.card import card_info, copy_license_files, write_card
from gqa_export.release.spec import ReleaseSpec, Variant
from gqa_export.runtime.evaluate import Scores, check_window, compare, read_text, score, tokenize
from gqa_export.runtime.providers import runnable_ep
from gqa_export.runtime.verify import RELEASE
from gqa_export.source.checkpoint import Checkpoint, open_checkpoint, source_dims
from gqa_export.speculative import Pair, build_with_draft, resolve_pair, retarget

FORMAT = "gqa-export-release/1"
Resolved = BuildPlan | Pair  # a variant's plan, or a draft variant's pair
SIGNIFICANT = 6  # digits of the perplexities in release.json: stable across reruns on one machine


class ReleaseError(GqaExportError):
    """A variant failed (export, lints, smoke run or gate): nothing was published."""

    exit_code = 1


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


def _inputs(spec: ReleaseSpec) -> list[tuple[Path, str]]:
    """Everything the spec names that -o must stay clear of: the source, recipe, eval text, drafts, adapters."""
    source = "GGUF file" if Path(spec.source).expanduser().is_file() else "model folder"
    named: list[tuple[str | Path | None, str]] = [(spec.source, source)]
    named.append((spec.eval.text if spec.eval else None, "eval text"))
    for variant in spec.variants:
        named += [(variant.options.recipe, "recipe"), (variant.draft, "draft model folder")]
        named += [(variant.options.kv.calibration, "KV text file")]
        named += [(folder, "PEFT adapter folder") for folder in variant.adapters]
    return local_inputs(*named)


def release(
    spec: ReleaseSpec, output: Path, overwrite: bool = False, reporter: Reporter | None = None
) -> ReleaseResult:
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    check_output(output, overwrite, [(spec.file.parent, SPEC_FOLDER), *_inputs(spec)], reporter.note)
    text = read_text(spec.eval.text) if spec.eval else None
    checkpoint = open_checkpoint(spec.source, spec.revision, reporter, spec.gguf_file)
    try:
        return _release(spec, output, overwrite, reporter, started, text, checkpoint)
    finally:
        checkpoint.close()  # what reading the source wrote (a GGUF's config/tokenizer folder)


def _release(
    spec: ReleaseSpec,
    output: Path,
    overwrite: bool,
    reporter: Reporter,
    started: float,
    text: str | None,
    checkpoint: Checkpoint,
) -> ReleaseResult:
    source = checkpoint.source
    check_outside(output, source.model_dir)
    _check_lengths(spec, source.model_dir)
    info = card_info(
        source.model_dir, source.source_id, source.is_local, spec.license, spec.base_model, spec.name, spec.tags,
        spec.file, spec.repo,
    )  # fmt: skip
    plans = [
        _resolve(variant, i, len(spec.variants), checkpoint, reporter, output)
        for i, variant in enumerate(spec.variants)
    ]
    with StagedPackage(output, overwrite, reporter.note) as staged:
        builds = [
            _build_variant(variant, plan, i, len(spec.variants), staged.path, checkpoint, reporter, output)
            for i, (variant, plan) in enumerate(zip(spec.variants, plans, strict=True))
        ]
        evals, measured = _evaluate(spec, text, staged.path, reporter, output) if text is not None else ({}, None)
        entries = [_entry(staged.path, v, b, evals.get(v.path)) for v, b in zip(spec.variants, builds, strict=True)]
        reporter.stage("model card and release.json")
        write_card(staged.path, info, entries, evaluated=spec.eval is not None)
        copy_license_files(source.model_dir, staged.path)
        document = {
            "format": FORMAT,
            "tool": tool_entry(),
            "created": created_at(),
            "source": source_entry(source),
            "name": info.title,
            "base_model": info.base_model,
            "license": info.license,
            "eval": measured,
            "variants": entries,
            "files": {name: entry for name, entry in file_digests(staged.path).items() if name != RELEASE},
            **environment_entry(),
        }
        write_sealed(staged.path / RELEASE, document)
        committed = staged.commit()
    return ReleaseResult(committed, builds, entries, time.perf_counter() - started)


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
            context = dims[variant.options.recipe].max_position_embeddings
            raise InputError(
                f"{variant.where}: max_length {variant.options.max_length} exceeds the model's context length "
                f"{context}; lower it to {context} or less"
            ) from None
        if spec.eval is not None and window is not None and window > limit:
            raise InputError(
                f"{spec.eval.where}.window {window} exceeds variant {variant.path}'s max_length {limit}: "
                "lower eval.window, or raise that variant's max_length"
            )


def _evaluate(
    spec: ReleaseSpec, text: str, root: Path, reporter: Reporter, output: Path
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Perplexity of every variant that runs here, compared with its reference, gates checked;
    and release.json's record of what was measured."""
    assert spec.eval is not None
    # one window for all: the smallest any variant's max_length allows
    window = min(check_window(root / v.path, spec.eval.window, spec.eval.stride)[0] for v in spec.variants)
    window, stride = check_window(root / spec.variants[0].path, window, spec.eval.stride)
    tokens = tokenize(root / spec.variants[0].path, text, spec.eval.max_tokens)
    scores: dict[str, Scores] = {}
    results: dict[str, dict[str, Any]] = {}
    for variant in spec.variants:
        folder = root / variant.path
        ep, why = runnable_ep(folder)
        if ep is None:
            if variant.gate is not None:
                raise ReleaseError(f"variant {variant.path} has a gate but cannot run here: {why}")
            reporter.note(f"{variant.path}: not evaluated ({why})")
            continue
        reporter.stage(f"eval {variant.path} on {ep}")
        try:
            scores[variant.path] = score(folder, tokens, window, stride, ep)
        except InputError as exc:
            raise ReleaseError(f"variant {variant.path}: {exc} (nothing was written to {output})") from None
        summary = scores[variant.path].summary()
        results[variant.path] = _rounded({k: v for k, v in summary.items() if k not in ("path", "kind")})
    failed = []  # every gate is checked, so one run names every variant that misses its gate
    for variant in spec.variants:
        reference = scores.get(variant.reference) if variant.reference else None
        if variant.path in scores and reference is not None:
            delta = compare(scores[variant.path], reference)
            results[variant.path].update(_rounded({**delta, "against": variant.reference}))
        if variant.gate is None:
            continue
        if reference is None:
            failed.append(f"variant {variant.path}: its gate's reference {variant.reference} cannot run here")
            continue
        increase = results[variant.path]["perplexity_increase_pct"]
        if increase > variant.gate.max_ppl_increase:
            failed.append(
                f"variant {variant.path}: perplexity {increase:+.3f}% over {variant.reference} exceeds its gate "
                f"of {variant.gate.max_ppl_increase:g}%"
            )
    if failed:
        raise ReleaseError(f"{'; '.join(failed)} (nothing was written to {output})")
    measured = {
        "text": spec.eval.text.name,
        "text_sha256": sha256_file(spec.eval.text),
        "tokens": len(tokens),
        "window": window,
        "stride": stride,
    }
    return results, measured


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


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: float(f"{v:.{SIGNIFICANT}g}") if isinstance(v, float) else v for k, v in values.items()}


def _smoke(result: BuildResult) -> dict[str, Any]:
    if result.smoke is None:
        return {"smoke": None}
    return {"smoke": {"ep": result.smoke.ep, "tokens_per_s": round(result.smoke.decode_tokens_per_s, 2)}}
