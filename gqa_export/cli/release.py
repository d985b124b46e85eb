"""`release`, `verify` and `eval`: publishing several variants, checking and measuring packages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gqa_export.cli.app import (
    EXPORT_LIBRARIES,
    OUTPUT,
    AsJson,
    Ep,
    Overwrite,
    Quiet,
    RichReporter,
    command,
    out,
    quiet_hub,
    value,
)
from gqa_export.units import size

# verify and eval have a few options and no panels: theirs are listed together, as one panel
PlainJson = Annotated[bool, typer.Option("--json", help="Print one JSON object describing the result.")]
PlainQuiet = Annotated[bool, typer.Option("-q", "--quiet", help="No progress output.")]


RELEASE_EPILOG = """Examples:

  gqa-export release release.yaml -o my-model-onnx && gqa-export verify my-model-onnx

On a CI matrix (docs/ci/github-release.yml): one part per job, then assemble:

  gqa-export release release.yaml --list

  gqa-export release release.yaml --variant cuda/cuda-fp16 -o part/

  gqa-export release assemble release.yaml parts/* -o my-model-onnx"""
MATRIX = "CI matrix"
Variants = Annotated[
    Optional[list[str]],
    typer.Option(
        "--variant",
        metavar="PATH",
        help="Export only this variant (its release path; repeatable) into a part of the release, for "
        "`release assemble`.",
        rich_help_panel=MATRIX,
    ),
]


@command("release", libraries=EXPORT_LIBRARIES, epilog=RELEASE_EPILOG)
def release_command(
    spec: Annotated[
        Path, typer.Argument(metavar="SPEC", help="Release spec YAML: source, variants, eval text, gates.")
    ],
    output: Annotated[
        Optional[Path],
        typer.Option(
            "-o",
            "--output",
            metavar="DIR",
            help="Release folder to create (the repo root); with --variant the "
            "part, with --resume the folder of parts.",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    variant: Variants = None,
    list_variants: Annotated[
        bool,
        typer.Option(
            "--list",
            help='Print the variants as a CI matrix and exit: {"include": [{variant, ep, runner, artifact, '
            "revision}]} (the Hub revision resolved to its commit).",
            rich_help_panel=MATRIX,
        ),
    ] = False,
    runner: Annotated[
        Optional[list[str]],
        typer.Option(
            "--runner",
            metavar="EP=LABEL",
            help="With --list: the runner label of an EP's jobs (repeatable; default ubuntu-latest).",
            rich_help_panel=MATRIX,
        ),
    ] = None,
    revision: Annotated[
        Optional[str],
        typer.Option(
            "--revision",
            metavar="REV",
            help="Hub commit to export, replacing the spec's revision (every job the same: --list gives it).",
            rich_help_panel=MATRIX,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="-o is a folder of parts: skip the variants whose part there verifies, export each other one "
            "into its own part.",
            rich_help_panel=MATRIX,
        ),
    ] = False,
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    quiet: Quiet = False,
) -> None:
    """Export every variant of SPEC from one fetch into OUTPUT, all or nothing, with a model card."""
    from gqa_export.errors import InputError
    from gqa_export.release import load_spec, release
    from gqa_export.release.parts import select

    quiet_hub(quiet)
    loaded = load_spec(spec)
    if list_variants:
        from gqa_export.release.matrix import matrix, runner_labels

        if output is not None or variant or resume:
            raise InputError("--list prints the matrix and exports nothing: drop -o, --variant and --resume")
        print(json.dumps(matrix(loaded, runner_labels(runner or []), revision)))
        return
    if runner:
        raise InputError("--runner applies to --list")
    if output is None:
        raise InputError("release needs -o DIR, the release folder (or --list to print the variants)")
    only = select(loaded, variant) if variant else None
    if resume:
        from gqa_export.release.resume import resume as resume_parts

        if overwrite:
            raise InputError("--resume replaces only parts that do not verify; drop --overwrite")
        result = resume_parts(loaded, output, only or loaded.variants, RichReporter(quiet), revision)
        if as_json:
            print(json.dumps(result.as_json()))
        elif not quiet:
            made = ", ".join(str(r.output) for r in result.made) or "none"
            out.print(escape(f"{output}: {len(result.skipped)} variant(s) already done, made {made}"))
        return
    result = release(loaded, output, overwrite, RichReporter(quiet), only, revision)
    _print_release(result.as_json(), as_json, quiet)


def _print_release(summary: dict[str, Any], as_json: bool, quiet: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    if quiet:
        return
    table = Table("variant", "attention", "size", "perplexity", "time")
    for v in summary["variants"]:
        evaluation = v.get("eval") or {}
        ppl = f"{evaluation['perplexity']:.6g}" if "perplexity" in evaluation else "-"
        if "perplexity_increase_pct" in evaluation:
            ppl += f" ({evaluation['perplexity_increase_pct']:+.3f}%)"
        table.add_row(
            v["path"], v["attention"], size(v["bytes"]), ppl, f"{v['seconds']:.1f} s" if "seconds" in v else "-"
        )
    out.print(table)
    out.print(escape(f"{summary['output']}: {size(summary['total_bytes'])} in {summary['seconds']:.1f} s"))


@command(
    "release-assemble",
    hidden=True,
    epilog="Example:\n\n  gqa-export release assemble release.yaml parts/* -o my-model-onnx && gqa-export verify "
    "my-model-onnx",
)
def assemble_command(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The release spec every part was made from.")],
    parts: Annotated[
        list[Path], typer.Argument(metavar="PART", help="The part folders (`release SPEC --variant ... -o PART`).")
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", metavar="DIR", help="Release folder to create (the repo root).", rich_help_panel=OUTPUT
        ),
    ],
    overwrite: Overwrite = False,
    as_json: AsJson = False,
    quiet: Quiet = False,
) -> None:
    """Check every part of SPEC's release and put them together in OUTPUT: the bytes one machine's
    `release SPEC -o OUTPUT` writes."""
    from gqa_export.release import load_spec
    from gqa_export.release.combine import assemble_parts

    result = assemble_parts(load_spec(spec), parts, output, overwrite, RichReporter(quiet))
    _print_release(result.as_json(), as_json, quiet)


@command("verify", epilog="Examples:\n\n  gqa-export verify out\n\n  gqa-export verify my-model-onnx --smoke --json")
def verify_command(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="A package folder, or a release folder (with release.json).")
    ],
    smoke: Annotated[bool, typer.Option("--smoke", help="Also generate a few tokens with each package.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Lint warnings fail too (exit 1).")] = False,
    as_json: PlainJson = False,
) -> None:
    """Recompute every hash, look for missing or extra files, lint; exit 1 on any problem."""
    from gqa_export.runtime.verify import failing, verify

    report = verify(path, smoke)
    if as_json:
        print(json.dumps(report))
    else:
        _print_verify(report)
    if failing(report, strict):
        raise typer.Exit(code=1)


def _print_verify(report: dict[str, Any]) -> None:
    for problem in report["problems"]:
        out.print(f"[red]✗[/] {escape(problem)}", highlight=False)
    for package in report["packages"]:
        for problem in package["problems"]:
            out.print(f"[red]✗[/] {escape(problem)}", highlight=False)
        for finding in package["findings"]:
            if finding["severity"] in ("error", "warning"):
                color = "red" if finding["severity"] == "error" else "yellow"
                out.print(
                    f"[{color}]{finding['severity']}[/] "
                    + escape(f"{package['path']}: {finding['id']}: {finding['message']}")
                )
        smoke = package.get("smoke")
        if smoke is not None:
            ran = f"{smoke['new_tokens']} tokens on {smoke['ep']}" if smoke["ran"] else f"not run ({smoke['note']})"
            out.print(escape(f"  {package['path']}: smoke run {ran}"), highlight=False)
    count = len(report["packages"])
    verdict = "[green]ok[/]" if report["ok"] else "[red]FAILED[/]"
    out.print(
        f"{verdict}: " + escape(f"{report['kind']} {report['path']} ({count} package{'s' if count != 1 else ''})")
    )


@command(
    "eval", epilog="Examples:\n\n  gqa-export eval out-int4 --text wiki.txt --reference out-fp32 --max-ppl-increase 2"
)
def eval_command(
    path: Annotated[Path, typer.Argument(metavar="PACKAGE", help="Package folder to evaluate.")],
    text: Annotated[Path, typer.Option("--text", help="UTF-8 text file to compute perplexity over.")],
    reference: Annotated[
        Optional[Path],
        typer.Option("--reference", help="Another package, or an HF folder (needs torch), to compare against."),
    ] = None,
    max_ppl_increase: Annotated[
        Optional[float],
        typer.Option("--max-ppl-increase", help="Gate: exit 1 when perplexity exceeds the reference's by more (%)."),
    ] = None,
    window: Annotated[
        Optional[int], typer.Option("--window", help="Tokens per window (default min(max_length, 1024)).")
    ] = None,
    stride: Annotated[
        Optional[int], typer.Option("--stride", help="Tokens between window starts (default window/2).")
    ] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="Score only the first N tokens.")] = None,
    ep: Annotated[
        Optional[Ep], typer.Option("--ep", help="Execution provider (default: where the package runs here).")
    ] = None,
    as_json: PlainJson = False,
    quiet: PlainQuiet = False,
) -> None:
    """Perplexity and next-token accuracy of a package over a text, optionally against a reference."""
    from gqa_export.package.paths import package_folder
    from gqa_export.runtime.evaluate import evaluate, read_text

    path = package_folder(path)  # the folder, or its genai_config.json
    _quiet_transformers()
    report = evaluate(
        path, read_text(text), reference, window, stride, max_tokens, max_ppl_increase, value(ep), RichReporter(quiet)
    )
    if as_json:
        print(json.dumps(report))
    else:
        _print_eval(report)
    if not report["passed"]:
        raise typer.Exit(code=1)


def _print_eval(report: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("package", f"{report['path']} ({report['ep']})")
    scored = f"{report['scored']} scored, window {report['window']}, stride {report['stride']}"
    table.add_row("tokens", f"{report['tokens']} ({scored})")
    table.add_row("perplexity", f"{report['perplexity']:.6g}")
    table.add_row("next-token accuracy", f"{report['accuracy']:.2%}")
    if "reference" in report:
        ref, delta = report["reference"], report["delta"]
        measured = f"perplexity {ref['perplexity']:.6g}, accuracy {ref['accuracy']:.2%}"
        table.add_row("reference", f"{ref['path']} ({ref['kind']}): {measured}")
        table.add_row("perplexity increase", f"{delta['perplexity_increase_pct']:+.3f}%")
        table.add_row("accuracy delta", f"{delta['accuracy_delta']:+.2%}")
        table.add_row("top-1 agreement", f"{delta['top1_agreement']:.2%}")
    if "gate" in report:
        gate = report["gate"]
        verdict = "[green]passed[/]" if gate["passed"] else "[red]FAILED[/]"
        table.add_row("gate", f"{verdict} (at most +{gate['max_ppl_increase_pct']:g}%)")
    out.print(table)


def _quiet_transformers() -> None:
    """transformers' weight-loading bars and advisories would interleave with the report."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
