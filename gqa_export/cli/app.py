"""The Typer app, its consoles and reporter, and the options several commands share.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 a package that fails its smoke run,
lints, verification or an accuracy gate. Progress and notes go to stderr so that `--json` output
on stdout stays machine-readable.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gqa_export import __version__
from gqa_export.errors import GqaExportError
from gqa_export.progress import Advance

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


def fail(exc: GqaExportError) -> typer.Exit:
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


def quiet_hub(quiet: bool) -> None:
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
    # `eval --reference HF_FOLDER` runs transformers with torch: the one command that keeps it
    if not (sys.argv[1:2] == ["eval"] and any(a.startswith("--reference") for a in sys.argv)):
        hide_torch()
    # A SIGTERM unwinds like Ctrl-C, so the staging folder is removed and no half package stays.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    app()
