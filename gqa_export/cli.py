"""The `gqa-export` command line: parse arguments, call the pipeline, print. Nothing else.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 a package that fails its smoke run.
Progress and notes go to stderr so that `--json` output on stdout stays machine-readable.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gqa_export import __version__
from gqa_export.errors import GqaExportError
from gqa_export.progress import Advance
from gqa_export.quantize import QuantOptions
from gqa_export.render import size

app = typer.Typer(
    name="gqa-export",
    help="Turn a Hugging Face causal LM into a ready-to-run ONNX Runtime GenAI package.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()


class RichReporter:
    """Stage lines, notes and progress bars on stderr; silent with --quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def stage(self, name: str) -> None:
        if not self.quiet:
            err.print(f"[bold cyan]>[/] {name}")

    def note(self, message: str) -> None:
        if not self.quiet:
            err.print(f"[yellow]note:[/] {message}")

    def download_bar(self) -> type | None:
        """huggingface_hub's per-file download bars, drawn by rich (tqdm's rich front end)."""
        if self.quiet:
            return None
        import warnings

        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm_rich

        warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
        return tqdm_rich

    @contextmanager
    def task(self, description: str, total: int | None) -> Iterator[Advance]:
        if self.quiet:
            yield lambda n=1: None
            return
        columns = (TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)


def _fail(exc: GqaExportError) -> typer.Exit:
    err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(code=exc.exit_code)


def _version(value: bool) -> None:
    if value:
        out.print(f"gqa-export {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """gqa-export: fetch -> build -> optimize -> quantize -> package -> smoke-run."""


BlockSize = Annotated[int, typer.Option("--block-size", help="int4/int8: quantization block size (16-256).")]
Asymmetric = Annotated[bool, typer.Option("--asymmetric", help="int4/int8: zero points instead of symmetric.")]
QuantMethod = Annotated[str, typer.Option("--quant-method", help="int4/int8: rtn (onnxruntime) or search.")]
AccuracyLevel = Annotated[
    Optional[int], typer.Option("--accuracy-level", help="MatMulNBits accuracy_level (default 4 on cpu, 0 on cuda).")
]
KeepFloat = Annotated[
    Optional[list[str]], typer.Option("--keep-float", help="Keep weights matching this pattern float (e.g. lm_head*).")
]
ReportFlag = Annotated[bool, typer.Option("--report", help="int4/int8: write quant_report.json (accuracy vs float).")]
Activations = Annotated[
    Optional[str], typer.Option("--activations", help="int4/int8 on cuda: fp16 (default) or bf16 activations.")
]
QuantEmbeddings = Annotated[
    bool, typer.Option("--quant-embeddings", help="int4/int8: quantize an untied embedding too (tied ones always are).")
]


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
        raise _fail(
            GqaExportError(f"--bidirectional-token-ids takes comma-separated integers, got {bidirectional!r}")
        ) from None
    if attention is not None and attention not in ("gqa", "bias", "split", "auto"):
        raise _fail(GqaExportError(f"unknown --attention '{attention}'; choose gqa, bias, split or auto"))
    quant = QuantOptions(
        block_size, asymmetric, quant_method, accuracy_level, tuple(keep_float or ()), quant_embeddings, activations
    )
    opts = BuildOptions(
        model, output, ep, precision, revision, max_length, overwrite, not no_smoke, recipe, tuple(settings or ()),
        attention, ids, quant, report,
    )  # fmt: skip
    _quiet_hub(quiet or as_json)
    try:
        result = run_build(opts, RichReporter(quiet or as_json))
    except GqaExportError as exc:
        raise _fail(exc) from None
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

    _quiet_hub(quiet)
    try:
        source = resolve_source(model, revision, RichReporter(quiet))
    except GqaExportError as exc:
        raise _fail(exc) from None
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
        raise _fail(exc) from None
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


@app.command("inspect")
def inspect_command(
    path: Annotated[Path, typer.Argument(help="Package folder, genai_config.json or a bare .onnx file.")],
    source: Annotated[
        Optional[Path], typer.Option("--source", help="HF model folder to cross-check (config, generation_config).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: summary, layers, findings.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")] = False,
) -> None:
    """Describe a package (I/O, attention per layer, KV layout) and lint it. Exit 1 on errors."""
    from gqa_export.inspect_report import inspect_package

    try:
        report = inspect_package(path, source)
    except GqaExportError as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps(report))
    else:
        from gqa_export.render import inspect_report

        inspect_report(out, report)
    failing = {"error", "warning"} if strict else {"error"}
    if any(f["severity"] in failing for f in report["findings"]):
        raise typer.Exit(code=1)


@app.command("run")
def run_command(
    path: Annotated[Path, typer.Argument(help="Package folder.")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Prompt text, or - to read stdin.")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Tokens to generate at most.")] = 128,
    ep: Annotated[str, typer.Option("--ep", help="cpu or cuda.")] = "cpu",
    temperature: Annotated[Optional[float], typer.Option("--temperature", help="Sample with this temperature.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", help="Nucleus sampling.")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Top-k sampling.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed for sampling.")] = None,
    chat: Annotated[bool, typer.Option("--chat", help="Apply the tokenizer's chat template.")] = False,
    system: Annotated[Optional[str], typer.Option("--system", help="System message (implies --chat).")] = None,
    interactive: Annotated[bool, typer.Option("--interactive", "-i", help="Multi-turn chat on stdin.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of streaming.")] = False,
) -> None:
    """Generate from a package with onnxruntime-genai, streaming text as it comes."""
    from gqa_export.chat import Session

    if not interactive and prompt is None:
        raise _fail(GqaExportError("pass --prompt TEXT (or --prompt - to read stdin), or --interactive"))
    if ep not in ("cpu", "cuda"):
        raise _fail(GqaExportError(f"unknown --ep '{ep}'; choose cpu or cuda"))
    text = sys.stdin.read() if prompt == "-" else prompt
    try:
        session = Session(
            path,
            ep,
            max_new_tokens,
            (temperature, top_p, top_k, seed),
            chat or system is not None or interactive,
            system,
        )
    except GqaExportError as exc:
        raise _fail(exc) from None
    if interactive:
        session.interactive(sys.stdin, lambda piece: out.print(piece, end="", markup=False, highlight=False), err)
        return
    assert text is not None
    result = session.turn(text, None if as_json else (lambda piece: print(piece, end="", flush=True)))
    if as_json:
        print(json.dumps(session.result_json(result)))
        return
    print()
    err.print(
        f"[dim]{result.prompt_tokens} prompt tokens, {len(result.tokens)} new tokens, "
        f"prefill {result.prefill_ms:.1f} ms, {result.decode_tokens_per_s:.1f} tok/s[/]"
    )


recipes_app = typer.Typer(help="List the built-in recipes or show one.", invoke_without_command=True)
app.add_typer(recipes_app, name="recipes")


@recipes_app.callback()
def recipes_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the recipes as JSON.")] = False,
) -> None:
    """Table of recipes: name, model types, default attention, EPs and default precisions."""
    if ctx.invoked_subcommand is not None:
        return
    from gqa_export.recipes import builtin_recipes

    recipes = builtin_recipes()
    if as_json:
        print(json.dumps([r.as_dict() for r in recipes]))
        return
    table = Table("name", "model types", "attention", "EPs (default precision)")
    for r in recipes:
        eps = ", ".join(f"{ep} ({prec})" for ep, prec in r.default_precision.items())
        table.add_row(r.name, ", ".join(r.model_types), r.attention.mode, eps)
    out.print(table)


@recipes_app.command("show")
def recipes_show(
    name: Annotated[str, typer.Argument(help="Recipe name (see `gqa-export recipes`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of YAML.")] = False,
) -> None:
    """Print one recipe with every default resolved."""
    import yaml

    from gqa_export.recipes import find_recipe

    try:
        data = find_recipe(name).as_dict()
    except GqaExportError as exc:
        raise _fail(exc) from None
    print(
        json.dumps(data, indent=2) if as_json else yaml.safe_dump(data, sort_keys=False),
        end="" if not as_json else "\n",
    )


def _quiet_hub(quiet: bool) -> None:
    if quiet:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def hide_torch() -> None:
    """Keep torch out of the CLI process: the export path never needs it.

    With torch installed, transformers' config module imports it eagerly (seconds of start-up and
    hundreds of MB) only to build rope helpers we do not use. A `None` entry in `sys.modules` makes
    `importlib.util.find_spec("torch")` report it absent, so transformers takes its torch-free path.
    """
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # its "PyTorch was not found" line


def main() -> None:
    hide_torch()
    # A SIGTERM unwinds like Ctrl-C, so the staging folder is removed and no half package stays.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    app()
