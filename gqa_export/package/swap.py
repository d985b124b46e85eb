"""Putting a finished output where -o says: renames that a kill at any instant leaves recoverable.

Every command writes its output under a hidden name beside -o, `.NAME.partial-TAG` (TAG is the
writer's PID and 8 random hex digits), and moves it in place only when it is complete. Without an
existing -o that is one atomic rename. Replacing one (`--overwrite`) takes two renames, which no
file system makes one step, so they are a transaction with a journal `.NAME.swap-TAG` beside -o
(docs/architecture.md §6):

1. journal `swap`: both outputs are whole, the new one at `.NAME.partial-TAG`, the old one at NAME
2. rename NAME to `.NAME.old-TAG`
3. rename `.NAME.partial-TAG` to NAME: the new output is committed
4. journal `committed`
5. rename `.NAME.old-TAG` to `.NAME.trash-TAG`, then delete that
6. delete the journal

SIGINT and SIGTERM are held from step 1 to step 6 and delivered after it; one that arrives before
step 2 abandons the swap instead, so -o keeps the old output. A SIGKILL or a power cut can stop the
process anywhere; the next run for the same -o (`recover`) reads the journal and finishes or undoes
the swap, never guessing which output is whole:

- journal `swap` and `.NAME.partial-TAG` still there: step 3 never happened (a rename is atomic),
  so the old output is whole and goes back to NAME if step 2 had moved it; the new one is removed.
- journal `swap` with `.NAME.partial-TAG` gone, or `committed`: NAME holds the new output, and the
  old one is deleted (through the trash name, so a half-deleted folder is never put back).

The journal is written whole under a temporary name (`.NAME.swap-TAG.writing`, fsync'd) and renamed
over its own name, so the journal is never partial; a `.writing` file alone means step 2 never
began. Each recovery step is itself safe to interrupt, and only names that gqa-export made (this
-o's name, a `partial`/`old`/`trash`/`swap` kind and a TAG whose process is gone) are ever touched.
A single file (`gqa-export adapter`, package/adapter_file.py) is put in place in one atomic step
(`committing`) and needs no journal.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json
from gqa_export.package.ownership import MANIFEST, RELEASE, TOOL, listed_files

JOURNAL_FORMAT = 1
WRITING = ".writing"
KINDS = ("partial", "old", "trash", "swap")
_TAG = re.compile(r"(\d+)-[0-9a-f]{8}")
_STEPS = ("swap", "committed")
_committed: list[Path] = []  # outputs this process put in place (what an interrupt message names)


def step_reached(step: str, output: Path) -> None:
    """Called at each step of putting `output` in place; does nothing. The fault tests replace it
    to stop a real process at every step (tests/faults/killer.py, test_swap.py)."""


@dataclass(frozen=True)
class SwapNames:
    """The hidden names beside `output` that one writer (its `tag`) uses."""

    output: Path
    tag: str

    def of(self, kind: str) -> Path:
        return self.output.parent / f".{self.output.name}.{kind}-{self.tag}"

    @property
    def staging(self) -> Path:
        return self.of("partial")

    @property
    def old(self) -> Path:
        return self.of("old")

    @property
    def trash(self) -> Path:
        return self.of("trash")

    @property
    def journal(self) -> Path:
        return self.of("swap")

    def record(self, step: str) -> dict[str, object]:
        return {
            "tool": TOOL,
            "journal": JOURNAL_FORMAT,
            "step": step,
            "output": self.output.name,
            "new": self.staging.name,
            "old": self.old.name,
            "trash": self.trash.name,
        }


@contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM recorded instead of handled inside the block (the list holds them), then
    delivered to the handlers that were installed before it. Only the main thread can install
    handlers; elsewhere the block runs unprotected and the journal alone makes it recoverable."""
    pending: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if handler is not None and handler is not signal.SIG_IGN:  # None: installed outside Python
                previous[signum] = signal.signal(signum, lambda got, _frame: pending.append(got))
    try:
        yield pending
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            signal.raise_signal(pending[0])


def committed_outputs() -> list[Path]:
    """Outputs this process has put in place since `forget_committed` (the CLI's interrupt line)."""
    return list(_committed)


def forget_committed(under: Path | None = None) -> None:
    """Forget every record (a new command), or those inside `under` (a staging folder removed with
    the outputs committed into it: a release's variants)."""
    _committed[:] = [] if under is None else [p for p in _committed if under not in p.parents]


@contextmanager
def committing(output: Path) -> Iterator[None]:
    """The block that puts a finished output at `output` in one atomic step (a rename, a link, a
    file renamed over another): signals held, the steps reported, the commit recorded. A signal
    that came before the block's body stops it there, with `output` as it was."""
    with deferred_signals() as pending:
        step_reached("ready", output)
        if pending:
            raise KeyboardInterrupt  # the signal is delivered first, as the block ends
        yield
        _committed.append(output)
        step_reached("in", output)
    _fsync_dir(output.parent)


def commit_new(staging: Path, output: Path) -> None:
    """Rename the finished `staging` folder to `output`, which does not exist."""
    with committing(output):
        staging.rename(output)


def swap_in(names: SwapNames) -> None:
    """Replace the existing folder `names.output` (checked replaceable) by `names.staging`."""
    with deferred_signals() as pending:
        _write_journal(names, "swap")
        step_reached("journal", names.output)
        if pending:  # nothing moved yet: stop with the old output in place
            names.journal.unlink()
            raise KeyboardInterrupt  # the signal is delivered first, as the block ends
        try:
            names.output.rename(names.old)
        except BaseException:
            names.journal.unlink()
            raise
        step_reached("aside", names.output)
        try:
            names.staging.rename(names.output)
        except BaseException:
            names.old.rename(names.output)  # the old output goes back: --overwrite never loses it
            names.journal.unlink()
            raise
        _committed.append(names.output)
        step_reached("in", names.output)
        _fsync_dir(names.output.parent)
        try:
            _write_journal(names, "committed")
        except OSError:  # disk full: `swap` with the staging name gone records the same
            pass
        step_reached("committed", names.output)
        _finish(names)


def _finish(names: SwapNames) -> None:
    """Steps 5 and 6: the old output leaves through the trash name, then the journal goes."""
    if names.old.exists() or names.old.is_symlink():
        names.old.rename(names.trash)
    step_reached("trash", names.output)
    _remove(names.trash)
    step_reached("removed", names.output)
    names.journal.unlink(missing_ok=True)
    _fsync_dir(names.output.parent)


def _write_journal(names: SwapNames, step: str) -> None:
    import json

    temporary = names.journal.with_name(names.journal.name + WRITING)
    try:
        with temporary.open("x") as f:
            f.write(json.dumps(names.record(step), indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        step_reached(f"{step}-writing", names.output)
        temporary.replace(names.journal)
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_dir(names.journal.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the renames in `folder` durable (a power cut then replays the journal, not older names)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder; the renames stay ordered anyway
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _left(output: Path) -> dict[str, dict[str, Path]]:
    """Hidden names beside `output` that a gone process made: tag -> kind ("writing" for a
    temporary journal) -> path."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(output.parent.iterdir()):
        for kind in KINDS:
            prefix = f".{output.name}.{kind}-"
            if not path.name.startswith(prefix):
                continue
            rest = path.name[len(prefix) :]
            if kind == "swap" and rest.endswith(WRITING):
                kind, rest = "writing", rest.removesuffix(WRITING)
            match = _TAG.fullmatch(rest)
            if match and not pid_alive(int(match.group(1))):
                found.setdefault(rest, {})[kind] = path
    return found


def recover(output: Path) -> list[str]:
    """Finish or undo what killed runs left beside `output`: one line per run, saying which output
    is now in place.

    A journal decides its swap (module docstring). Without one, the run never moved -o: its staging
    folder or file and a temporary journal are removed. An `.old-` folder without a journal comes
    from gqa-export 0.1.0 (before the journal): it is put back only when NAME is missing and every
    file its manifest or release.json lists is there, and removed otherwise.
    """
    output = output.resolve()
    if not output.parent.is_dir():
        return []
    done = []
    for tag, paths in _left(output).items():
        names = SwapNames(output, tag)
        with deferred_signals():  # each step is safe to kill; SIGINT/SIGTERM wait for the last
            done.append(_resume(names, paths) if "swap" in paths else _clear(names, paths))
    return done


def _clear(names: SwapNames, paths: dict[str, Path]) -> str:
    """A run that left no journal: it never moved -o (or is gqa-export 0.1.0's, see `recover`)."""
    pid = names.tag.split("-")[0]
    removed = []
    for kind in ("writing", "partial", "trash"):
        if kind in paths:
            _remove(paths[kind])
            removed.append(paths[kind].name)
    old = paths.get("old")
    if old is not None:  # gqa-export 0.1.0 moved -o aside without a journal
        what = f"an interrupted run {pid} of gqa-export 0.1.0"
        if not _exists(names.output) and _whole(old):
            old.rename(names.output)
            _fsync_dir(names.output.parent)
            return f"restored the previous {_what(names.output)} at {names.output} from {old.name} ({what})"
        _remove(old)
        if _exists(names.output):
            return f"kept the new {_what(names.output)} at {names.output}; removed {old.name}, replaced by {what}"
        return f"removed {old.name}, an incomplete output left by {what}; nothing is at {names.output}"
    if _exists(names.output):
        return (
            f"kept the previous {_what(names.output)} at {names.output}: run {pid} was interrupted before it replaced "
            f"it; "
            f"removed {', '.join(removed)}"
        )
    return f"removed {', '.join(removed)}, left by run {pid}, which was interrupted before it wrote {names.output}"


def _resume(names: SwapNames, paths: dict[str, Path]) -> str:
    """A run that left its journal: finish its swap or undo it, as the journal says."""
    journal = paths["swap"]
    data = read_json(journal)
    expected = names.record(str((data or {}).get("step")))
    if data != expected or data["step"] not in _STEPS:
        raise InputError(
            f"{journal} is not a swap journal gqa-export wrote, so it cannot tell whether {names.output} or "
            f"{names.old.name} is the whole output; check them with `gqa-export verify`, then remove the other "
            "and the journal"
        )
    pid = names.tag.split("-")[0]
    if "writing" in paths:  # the `committed` journal being written: `swap` still says what happened
        _remove(paths["writing"])
    if data["step"] == "swap" and _exists(names.staging):  # step 3 never happened
        moved = _exists(names.old)
        if moved and _exists(names.output):
            raise InputError(
                f"{names.output} appeared after an interrupted run (pid {pid}) moved the output it was replacing "
                f"to {names.old.name}; move one of them away (see {journal.name})"
            )
        if moved:
            names.old.rename(names.output)
        _fsync_dir(names.output.parent)
        names.journal.unlink()
        _remove(names.staging)
        how = f"restored the previous {_what(names.output)} at {names.output} from {names.old.name}"
        if not moved:
            how = f"kept the previous {_what(names.output)} at {names.output}"
        return f"{how}: run {pid} was interrupted before its new one was in place; removed {names.staging.name}"
    if not _exists(names.output) and _exists(names.old):  # NAME removed since; the old output is whole
        names.old.rename(names.output)
        _fsync_dir(names.output.parent)
        names.journal.unlink()
        return f"restored the previous {_what(names.output)} at {names.output} from {names.old.name} (run {pid})"
    _finish(names)
    return (
        f"kept the new {_what(names.output)} at {names.output}: run {pid} had put it in place before it was "
        f"interrupted; removed the one it replaced ({names.old.name})"
    )


def _whole(folder: Path) -> bool:
    """Every file its manifest.json or release.json lists is there (a folder rmtree stopped in
    is missing some)."""
    listed = listed_files(folder) if folder.is_dir() else None
    return bool(listed) and all((folder / name).is_file() for name in listed or ())


def _what(path: Path) -> str:
    if not path.is_dir():
        return "file"
    if (path / RELEASE).is_file():
        return "release"
    return "package" if (path / MANIFEST).is_file() else "output folder"
