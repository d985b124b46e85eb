"""The Typer app, its consoles and reporter, and the options several commands share.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 a package that fails its smoke run,
lints, verification or an accuracy gate. Progress and notes go to stderr so that `--json` output
on stdout stays machine-readable.
"""

from __future__ import annotations

import enum
import functools
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from gqa_export import __version__, choices
from gqa_export.choices import KV_CACHE_DTYPES, KV_SCALES
from gqa_export.cli.helptext import Command, Group
from gqa_export.errors import GqaExportError, RunError, from_os_error
from gqa_export.progress import Advance

app = typer.Typer(
    name="gqa-export",
    help="Turn a Hugging Face causal LM into a ready-to-run ONNX Runtime GenAI package.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=Group,
)
# Wider than any line we print: what "no limit" means for a console that is not a terminal.
PIPE_WIDTH = 100_000


class _Console(Console):
    """A rich Console that wraps and cuts only on a terminal.

    Rich lays out for 80 columns when its stream is not a TTY (a pipe, a file, a CI log): long
    lines fold and table cells are cut (two release variants whose folder names differ only past
    the cut look the same). There the width is unbounded, so every line reads as written.
    """

    @property
    def size(self) -> ConsoleDimensions:
        if self.is_terminal or self._width is not None:
            return super().size
        return ConsoleDimensions(PIPE_WIDTH, super().size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


err = _Console(stderr=True)
out = _Console()


class RichReporter:
    """Stage lines and notes on stderr, progress bars on a terminal only; silent with --quiet.

    Progress stays on with --json (stdout carries only the JSON), so a CI log shows how far an
    export got. When stderr is not a TTY the stage lines and notes come as plain lines (rich
    emits no styles there) and no bar is drawn, so the log holds no control characters.
    """

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    @property
    def bars(self) -> bool:
        return not self.quiet and err.is_terminal

    def stage(self, name: str) -> None:
        if not self.quiet:
            err.print(f"[bold cyan]>[/] {escape(name)}", highlight=False)

    def note(self, message: str) -> None:
        if not self.quiet:
            err.print(f"[yellow]note:[/] {escape(message)}", highlight=False)

    def download_bar(self) -> type | None:
        """huggingface_hub's per-file download bars, drawn by rich (tqdm's rich front end)."""
        if not self.bars:
            return None
        import warnings

        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm_rich

        warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
        return tqdm_rich

    @contextmanager
    def task(self, description: str, total: int | None) -> Iterator[Advance]:
        if not self.bars:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task, n)


def fail(exc: GqaExportError) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(code=exc.exit_code)


_SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
_received: list[int] = []


# What the export commands import before their first stage: the pipeline (onnx, onnx-ir, numpy),
# transformers' config classes, onnxscript's optimizer and onnxruntime (weight casts, smoke run).
EXPORT_LIBRARIES = (
    "gqa_export.pipeline",
    "transformers.models.auto.configuration_auto",
    "onnxscript.optimizer",
    "onnxruntime",
)


def load_libraries(names: tuple[str, ...]) -> None:
    """Import a command's libraries, then turn the cyclic garbage collector back on with what they
    built frozen.

    `main` starts the process with the collector off: the imports allocate millions of long-lived
    objects, and Python re-scans all of them in every full collection, during the imports and again
    in the first stage (a third of a second of a tiny build on the 2-core machines; measured by
    benchmarks/startup.py). Frozen, they are never scanned; the export's own objects are
    collected as usual. Where the collector is on (the library or tests calling the app directly)
    this only imports.
    """
    for name in names:
        importlib.import_module(name)
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def command(
    *args: Any, libraries: tuple[str, ...] = (), **kwargs: Any
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`app.command`, with every failure a command can meet turned into one line and an exit code.

    GqaExportError: its own code (2 bad input, 1 failed run). OSError (disk full, permissions) and
    MemoryError: exit 1. Ctrl-C or SIGTERM: exit 130/143 after the staging folder is gone (the
    stages clean up in their `finally`/`with` blocks while the KeyboardInterrupt unwinds).
    `libraries` are imported first (`load_libraries`).
    """

    def register(body: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(body)
        def guarded(*a: Any, **k: Any) -> None:
            try:
                load_libraries(libraries)
                body(*a, **k)
            except GqaExportError as exc:
                raise fail(exc) from None
            except OSError as exc:
                raise fail(from_os_error(exc)) from None
            except MemoryError:
                raise fail(RunError("ran out of memory; close other programs or use a machine with more RAM")) from None
            except Exception as exc:
                # a library that wraps our error (onnx-ir's SerdeError around a lazy tensor's
                # InputError) still gets our one line
                cause = _our_cause(exc)
                if cause is None:
                    raise
                raise fail(cause) from None
            except KeyboardInterrupt:
                code = _SIGNAL_EXIT[_received[-1] if _received else signal.SIGINT]
                err.print("[bold red]error:[/] interrupted; no partial output was left behind", highlight=False)
                raise typer.Exit(code=code) from None

        return app.command(*args, cls=Command, **kwargs)(guarded)

    return register


def _our_cause(exc: BaseException) -> GqaExportError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, GqaExportError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _interrupt(signum: int, _frame: object) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


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


def choice_enum(name: str, table: dict[str, str] | tuple[str, ...]) -> type[enum.Enum]:
    """A str Enum of a choices table: typer shows `[a|b|c]` and refuses anything else (exit 2)."""
    return enum.Enum(name, {key: key for key in table}, type=str)  # type: ignore[return-value]


def value(choice: enum.Enum | None) -> str | None:
    """The plain string behind an enum option (None stays None)."""
    return None if choice is None else str(choice.value)


Ep = choice_enum("Ep", choices.EPS)
Precision = choice_enum("Precision", choices.PRECISIONS)
IntPrecision = choice_enum("IntPrecision", ("int4", "int8"))
Attention = choice_enum("Attention", choices.ATTENTION_MODES)
Method = choice_enum("Method", choices.QUANT_METHODS)
ActivationDtype = choice_enum("ActivationDtype", choices.ALL_ACTIVATIONS)
KvCache = choice_enum("KvCache", KV_CACHE_DTYPES)
KvScales = choice_enum("KvScales", KV_SCALES)

TARGET, ATTENTION, QUANT, OUTPUT, RECIPE = "Target", "Attention", "Quantization (int4/int8)", "Output", "Recipe"
PIPELINE = "Inputs and outputs"

EpOption = Annotated[Ep, typer.Option("--ep", help="Execution provider to export for.", rich_help_panel=TARGET)]
BlockSize = Annotated[
    int, typer.Option("--block-size", metavar="N", help="Quantization block size (16-256).", rich_help_panel=QUANT)
]
Asymmetric = Annotated[
    Optional[bool],
    typer.Option(
        "--asymmetric/--symmetric",
        help="Zero points per block, or none. Default: asymmetric for rtn and k_quant (measured better on "
        "trained weights), symmetric for search.",
        rich_help_panel=QUANT,
    ),
]
QuantMethod = Annotated[
    Method, typer.Option("--quant-method", help=choices.described(choices.QUANT_METHODS), rich_help_panel=QUANT)
]
AccuracyLevel = Annotated[
    Optional[int],
    typer.Option(
        "--accuracy-level",
        metavar="0-4",
        help="MatMulNBits accuracy_level 0-4 (default 4 on cpu, 0 on cuda).",
        rich_help_panel=QUANT,
    ),
]
KeepFloat = Annotated[
    Optional[list[str]],
    typer.Option(
        "--keep-float",
        metavar="PATTERN",
        help="Keep weights matching this pattern float (e.g. lm_head*).",
        rich_help_panel=QUANT,
    ),
]
ReportFlag = Annotated[
    bool, typer.Option("--report", help="Write quant_report.json (accuracy vs float).", rich_help_panel=QUANT)
]
Activations = Annotated[
    Optional[ActivationDtype],
    typer.Option(
        "--activations",
        help="Activation dtype: "
        + "; ".join(f"{ep}: {' or '.join(dtypes)}" for ep, dtypes in choices.ACTIVATIONS.items())
        + " (first is the default).",
        rich_help_panel=QUANT,
    ),
]
Dequantize = Annotated[
    bool,
    typer.Option(
        "--dequantize",
        help="Read a bitsandbytes (NF4/FP4/LLM.int8) checkpoint, or a GGUF's IQ*/TQ* tensors, by dequantizing it "
        "exactly, then follow --precision (int4/int8 re-quantize it); without it such checkpoints are refused "
        "(docs/prequantized.md, docs/gguf.md).",
        rich_help_panel=TARGET,
    ),
]
GgufFile = Annotated[
    Optional[str],
    typer.Option(
        "--gguf-file",
        metavar="NAME",
        help="Which GGUF file of a folder or Hub repository to read (a split one by its first part); "
        "MODEL may also be a .gguf file itself (docs/gguf.md).",
        rich_help_panel=TARGET,
    ),
]
MixedPrecision = Annotated[
    Optional[list[str]],
    typer.Option(
        "--mixed-precision",
        metavar="SELECTOR:BITS",
        help="SELECTOR:int8|int4, repeatable; selectors: "
        + choices.described(choices.MIXED_SELECTORS)
        + "; or a weight-name pattern (e.g. '*.down_proj.weight:int8').",
        rich_help_panel=QUANT,
    ),
]
QuantEmbeddings = Annotated[
    bool,
    typer.Option(
        "--quant-embeddings", help="Quantize an untied embedding too (tied ones always are).", rich_help_panel=QUANT
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="Replace an existing output folder (kept intact until the new one is complete).",
        rich_help_panel=OUTPUT,
    ),
]  # fmt: skip
NoSmoke = Annotated[
    bool, typer.Option("--no-smoke", help="Skip the onnxruntime-genai smoke run.", rich_help_panel=OUTPUT)
]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="No progress output on stderr.", rich_help_panel=OUTPUT)]
AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON object describing the result.", rich_help_panel=OUTPUT)
]


def quiet_hub(quiet: bool) -> None:
    """huggingface_hub's own download bars off where ours are (quiet, or stderr not a terminal)."""
    if quiet or not err.is_terminal:
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
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    gc.disable()  # until the command's libraries are loaded (load_libraries)
    app()
