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
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape

from gqa_export import __version__, choices
from gqa_export.cli.helptext import Command, Group
from gqa_export.errors import GqaExportError, RunError, from_os_error, interrupts_kept
from gqa_export.package.swap import committed_outputs, forget_committed
from gqa_export.progress import Advance
from gqa_export.request.table import BY_KEY
from gqa_export.request.table import OUTPUT as OUTPUT_PANEL

try:  # typer >= 0.2x parses with its own copy of click, older ones with click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors  # type: ignore[no-redef]
# click >= 8.2 raises it for a bare group (its help already printed); older clicks exit 0 themselves
NO_ARGS_IS_HELP = getattr(click_errors, "NoArgsIsHelpError", ())


class OneLineUsageErrors(Group):
    """The top-level group, through which every command's parsing passes: click's usage errors (an
    option typo, a value outside a choice, a missing argument) come as one `error:` line with
    click's suggestion and where the help is, exit 2, instead of typer's usage line and boxed panel
    (a script's log then holds one line per failure, as for every other bad input)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            # not standalone: typer returns the exit code of a typer.Exit (or the command's None)
            result = super().main(*args, standalone_mode=False, **kwargs)
        except NO_ARGS_IS_HELP as exc:  # `gqa-export` alone: the help was printed
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            err.print(f"[bold red]error:[/] {escape(usage_line(exc))}", highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # end of input at a prompt
            err.print("[bold red]error:[/] aborted", highlight=False)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """`release assemble SPEC PART...` is its own command (registered as `release-assemble`):
        `release` takes a SPEC, so it cannot be a group; its first word picks the assemble step."""
        if args[:2] == ["release", "assemble"]:
            return "release assemble", self.get_command(ctx, "release-assemble"), args[2:]
        return super().resolve_command(ctx, args)


def usage_line(exc: Exception) -> str:
    """click's message on one line (typer's pydantic coercion adds "Value error, "), then where the
    command's help is."""
    message = " ".join(exc.format_message().replace("Value error, ", "").split()).rstrip(".")  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    return f"{message} (see '{ctx.command_path} --help')" if ctx is not None else message


app = typer.Typer(
    name="gqa-export",
    help="Turn a Hugging Face causal LM into a ready-to-run ONNX Runtime GenAI package.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=OneLineUsageErrors,
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
    stages clean up in their `finally`/`with` blocks while the KeyboardInterrupt unwinds); the line
    says so when the new output had already been committed.
    `libraries` are imported first (`load_libraries`).
    """

    def register(body: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(body)
        def guarded(*a: Any, **k: Any) -> None:
            forget_committed()
            try:
                with interrupts_kept():  # an error an interrupt caused is the interrupt (exit 130/143)
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
                err.print(f"[bold red]error:[/] {escape(_interrupted_line())}", highlight=False, soft_wrap=True)
                raise typer.Exit(code=code) from None

        return app.command(*args, cls=Command, **kwargs)(guarded)

    return register


def _interrupted_line() -> str:
    """What an interrupt left: nothing, or (a signal that came while the output was being swapped
    in, delivered once it was: docs/architecture.md §6) the whole new output in place."""
    committed = [path for path in committed_outputs() if path.exists()]
    if committed:
        return f"interrupted after the new output was committed: {committed[-1]} is complete, nothing partial was left"
    return "interrupted; no partial output was left behind"


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


Ep = choice_enum("Ep", choices.EPS)  # run, eval, adapter: the EP to run on
OUTPUT = OUTPUT_PANEL
# `release`'s own flags, as `build` and `quantize` declare them (gqa_export/request/table.py)
Overwrite = Annotated[bool, typer.Option("--overwrite", help=BY_KEY["overwrite"].help, rich_help_panel=OUTPUT)]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help=BY_KEY["quiet"].help, rich_help_panel=OUTPUT)]
AsJson = Annotated[bool, typer.Option("--json", help=BY_KEY["json"].help, rich_help_panel=OUTPUT)]


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
