"""A release's perplexity: every variant scored where it was exported, then compared and gated.

Scoring and judging are two steps so that a release split into parts (release/parts.py) measures
exactly what one machine does: each part scores its own variants over the same tokens and window
(the window is the smallest any variant of the spec allows, known from the plans before any
export) and records the per-position scores; `release assemble` then compares each quantized
variant with its reference and checks the gates from those records, as one machine does from its
own scores. The numbers in release.json are rounded to SIGNIFICANT digits either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import GqaExportError, InputError
from gqa_export.package.manifest import sha256_file
from gqa_export.progress import Reporter
from gqa_export.release.spec import ReleaseSpec, Variant
from gqa_export.runtime.evaluate import Scores, check_window, compare, score, tokenize
from gqa_export.runtime.providers import runnable_ep

SIGNIFICANT = 6  # digits of the perplexities in release.json: stable across reruns on one machine


class ReleaseError(GqaExportError):
    """A variant failed (export, lints, smoke run or gate): nothing was published."""

    exit_code = 1


def score_variants(
    spec: ReleaseSpec,
    text: str,
    root: Path,
    here: Sequence[Variant],
    max_lengths: Mapping[str, int],
    reporter: Reporter,
    output: Path,
) -> tuple[dict[str, Scores], dict[str, Any]]:
    """The scores of every variant in `here` (exported under `root`) that runs on this machine, and
    release.json's record of what was measured. `max_lengths`: every variant of the spec's, so a
    part picks the window one machine would."""
    assert spec.eval is not None
    # one window for all: the smallest any variant's max_length allows (the packages here are read,
    # so a static-window package is refused as `eval` refuses it)
    built = {v.path: check_window(root / v.path, spec.eval.window, spec.eval.stride)[0] for v in here}
    limits = [built.get(v.path, _window_of(spec, max_lengths[v.path])) for v in spec.variants]
    window, stride = check_window(root / here[0].path, min(limits), spec.eval.stride)
    tokens = tokenize(root / here[0].path, text, spec.eval.max_tokens)
    scores: dict[str, Scores] = {}
    for variant in here:
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
    measured = {
        "text": spec.eval.text.name,
        "text_sha256": sha256_file(spec.eval.text),
        "tokens": len(tokens),
        "window": window,
        "stride": stride,
    }
    return scores, measured


def _window_of(spec: ReleaseSpec, max_length: int) -> int:
    """check_window's window for a package of `max_length` (one exported elsewhere)."""
    from gqa_export.runtime.evaluate import DEFAULT_WINDOW

    assert spec.eval is not None
    return spec.eval.window if spec.eval.window is not None else min(DEFAULT_WINDOW, max_length)


def judge(
    spec: ReleaseSpec, scores: Mapping[str, Scores], output: Path, where: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """release.json's `eval` of every scored variant, compared with its reference; every gate
    checked (ReleaseError naming each failing variant). `where`: the part each variant was scored
    in, named when a gate's reference was not scored there."""
    results: dict[str, dict[str, Any]] = {}
    for path, scored in scores.items():
        results[path] = rounded({k: v for k, v in scored.summary().items() if k not in ("path", "kind")})
    failed = []  # every gate is checked, so one run names every variant that misses its gate
    for variant in spec.variants:
        reference = scores.get(variant.reference) if variant.reference else None
        if variant.path in scores and reference is not None:
            delta = compare(scores[variant.path], reference)
            results[variant.path].update(rounded({**delta, "against": variant.reference}))
        if variant.gate is None:
            continue
        if reference is None:
            place = f" (in {where[variant.reference]})" if where and variant.reference in where else ""
            failed.append(f"variant {variant.path}: its gate's reference {variant.reference}{place} cannot run here")
            continue
        increase = results[variant.path]["perplexity_increase_pct"]
        if increase > variant.gate.max_ppl_increase:
            failed.append(
                f"variant {variant.path}: perplexity {increase:+.3f}% over {variant.reference} exceeds its gate "
                f"of {variant.gate.max_ppl_increase:g}%"
            )
    if failed:
        raise ReleaseError(f"{'; '.join(failed)} (nothing was written to {output})")
    return {v.path: results[v.path] for v in spec.variants if v.path in results}


def rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: float(f"{v:.{SIGNIFICANT}g}") if isinstance(v, float) else v for k, v in values.items()}


def scores_record(scored: Scores) -> dict[str, Any]:
    """One variant's scores as a part records them (JSON floats round-trip exactly)."""
    return {
        "ep": scored.ep,
        "nll": scored.nll.tolist(),
        "top1": scored.top1.tolist(),
        "targets": scored.targets.tolist(),
    }


def scores_of(path: str, record: Mapping[str, Any]) -> Scores:
    """The Scores a part recorded for the variant at `path`."""
    return Scores(
        path,
        "package",
        str(record["ep"]),
        np.asarray(record["nll"], dtype=np.float64),
        np.asarray(record["top1"], dtype=np.int64),
        np.asarray(record["targets"], dtype=np.int64),
    )
