"""`build`, `fetch` and `quantize`: commands that write or fetch a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from gqa_export.cli.app import (
    AccuracyLevel,
    Activations,
    Asymmetric,
    BlockSize,
    KeepFloat,
    QuantEmbeddings,
    QuantMethod,
    ReportFlag,
    RichReporter,
    app,
    fail,
    out,
    quiet_hub,
)
from gqa_export.errors import GqaExportError
from gqa_export.quantize import QuantOptions
from gqa_export.render import size


@app.command()
def build(
    model: Annotated[str, typer.Argument(help="Hugging Face Hub id or local model folder.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Package folder to create.")],
    ep: Annotated[str, typer.Option("--ep", help="Execution provider: cpu or cuda.")] = "cpu",
    precision: Annotated[
        Optional[str], typer.Option("--precision", "-p", help="fp32, fp16 or bf16 (default: the recipe's for the EP).")
    ] = None,
    revision: Annotated[Optional[str], typer.Option("--revision", help="Hub branch, tag or commit.")] = None,
    max_length: Annotated[
        Optional[int],
        typer.Option("--max-length", help="search.max_length: KV buffer size (default min(context, 4096))."),
    ] = None,
    recipe: Annotated[
        Optional[Path], typer.Option("--recipe", help="Use this recipe YAML instead of the built-in match.")
    ] = None,
    settings: Annotated[
        Optional[list[str]],
        typer.Option("--set", help="Override one recipe key, e.g. --set attention.packed_qkv=false."),
    ] = None,
    attention: Annotated[
        Optional[str], typer.Option("--attention", help="gqa, bias, split or auto (default: the recipe's).")
    ] = None,
    bidirectional: Annotated[
        Optional[str],
        typer.Option("--bidirectional-token-ids", help="Comma-separated ids whose prompt runs attend bidirectionally."),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")] = False,
    no_smoke: Annotated[bool, typer.Option("--no-smoke", help="Skip the onnxruntime-genai smoke run.")] = False,
    block_size: BlockSize = 32,
    asymmetric: Asymmetric = False,
    quant_method: QuantMethod = "rtn",
    accuracy_level: AccuracyLevel = None,
    keep_float: KeepFloat = None,
    report: ReportFlag = False,
    quant_embeddings: QuantEmbeddings = False,
    activations: Activations = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the result.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress output.")] = False,
) -> None:
    """Export MODEL to an ONNX Runtime GenAI package in OUTPUT."""
    from gqa_export.pipeline import BuildOptions
    from gqa_export.pipeline import build as run_build

    try:
        ids = tuple(int(t) for t in bidirectional.split(",") if t.strip()) if bidirectional is not None else None
    except ValueError:
        raise fail(
            GqaExportError(f"--bidirectional-token-ids takes comma-separated integers, got {bidirectional!r}")
        ) from None
    if attention is not None and attention not in ("gqa", "bias", "split", "auto"):
        raise fail(GqaExportError(f"unknown --attention '{attention}'; choose gqa, bias, split or auto"))
    quant = QuantOptions(
        block_size, asymmetric, quant_method, accuracy_level, tuple(keep_float or ()), quant_embeddings, activations
    )
    opts = BuildOptions(
        model, output, ep, precision, revision, max_length, overwrite, not no_smoke, recipe, tuple(settings or ()),
        attention, ids, quant, report,
    )  # fmt: skip
    quiet_hub(quiet or as_json)
    try:
        result = run_build(opts, RichReporter(quiet or as_json))
    except GqaExportError as exc:
        raise fail(exc) from None
    if as_json:
        print(json.dumps(result.as_json()))
        return
    if quiet:
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("package", str(result.output))
    table.add_row("attention", f"{result.attention_mode} (recipe {result.recipe})")
    table.add_row("target", f"{result.ep} {result.precision}, max_length {result.max_length}")
    table.add_row("size", size(sum(result.files.values())))
    if result.smoke is not None:
        s = result.smoke
        table.add_row(
            "smoke run",
            f"{s.ep}: {len(s.tokens)} tokens, {s.decode_tokens_per_s:.1f} tok/s, prefill {s.prefill_ms:.1f} ms",
        )
    table.add_row("time", f"{result.seconds:.1f} s")
    out.print(table)


@app.command()
def fetch(
    model: Annotated[str, typer.Argument(help="Hugging Face Hub id.")],
    revision: Annotated[Optional[str], typer.Option("--revision", help="Hub branch, tag or commit.")] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print only the folder.")] = False,
) -> None:
    """Download (or find in the HF cache) only the files an export needs; print the folder."""
    from gqa_export.fetch import resolve_source

    quiet_hub(quiet)
    try:
        source = resolve_source(model, revision, RichReporter(quiet))
    except GqaExportError as exc:
        raise fail(exc) from None
    print(source.model_dir)


@app.command("quantize")
def quantize_command(
    package: Annotated[Path, typer.Argument(help="A float package written by gqa-export build.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Package folder to create.")],
    precision: Annotated[str, typer.Option("--precision", "-p", help="int4 or int8.")] = "int4",
    block_size: BlockSize = 32,
    asymmetric: Asymmetric = False,
    quant_method: QuantMethod = "rtn",
    accuracy_level: AccuracyLevel = None,
    keep_float: KeepFloat = None,
    report: ReportFlag = False,
    quant_embeddings: QuantEmbeddings = False,
    activations: Activations = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")] = False,
    no_smoke: Annotated[bool, typer.Option("--no-smoke", help="Skip the onnxruntime-genai smoke run.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the result.")] = False,
) -> None:
    """Re-quantize a float package to int4/int8 (MatMulNBits), streaming."""
    from gqa_export.requantize import requantize

    quant = QuantOptions(
        block_size, asymmetric, quant_method, accuracy_level, tuple(keep_float or ()), quant_embeddings, activations
    )
    try:
        result = requantize(package, output, precision, quant, overwrite, report, not no_smoke, RichReporter(as_json))
    except GqaExportError as exc:
        raise fail(exc) from None
    summary = {
        "output": str(result.output),
        "precision": result.precision,
        "files": result.files,
        "total_bytes": sum(result.files.values()),
        "report": result.report,
        "smoke_tokens_per_s": round(result.smoke.decode_tokens_per_s, 2) if result.smoke else None,
    }
    if as_json:
        print(json.dumps(summary))
    else:
        out.print(f"{result.output}: {result.precision}, {size(summary['total_bytes'])}")
        if result.report:
            out.print(f"logits vs float: {result.report['logits_vs_float']}")
