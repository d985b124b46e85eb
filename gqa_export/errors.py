"""Error types that carry the CLI's exit code.

Every error a user can fix (bad input, bad options, missing files) is an `InputError`: the CLI
prints its message as one line and exits 2. A package that was built but does not run is a
`SmokeRunError` (exit 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePath


class GqaExportError(Exception):
    """Base class: the message is one sentence saying what is wrong and how to fix it."""

    exit_code = 2


class InputError(GqaExportError):
    """Bad input: unknown architecture, missing shard, invalid option pair, output in the way."""

    exit_code = 2


class PackageLintError(GqaExportError):
    """The package this build wrote fails its own lints (a bug in gqa-export, never the input)."""

    exit_code = 1


class SmokeRunError(GqaExportError):
    """The exported package failed to load or generate with onnxruntime-genai."""

    exit_code = 1


class RunError(GqaExportError):
    """The run failed for a reason outside the input: disk full, permissions, memory (exit 1)."""

    exit_code = 1


# A staging folder, `.NAME.partial-PID-HEX` next to -o (package/staging.py): the package's files are
# written there and renamed into NAME when complete.
_STAGING_FOLDER = re.compile(r"^\.(?P<name>.+)\.partial-\d+-[0-9a-f]+$")


def final_path(path: str) -> str:
    """`path` as the user will find it: a staging folder in it named as the -o it becomes."""
    parts = PurePath(path).parts
    return str(PurePath(*[m["name"] if (m := _STAGING_FOLDER.match(part)) else part for part in parts]))


def from_os_error(exc: OSError) -> RunError:
    """One sentence for an OSError that escaped a stage: what failed, on which file, what to do.

    A full disk is the written side's: a copy or a rename (shutil.copy2, os.rename) puts its source
    in `filename` and what it writes in `filename2`, so the latter is named when there is one."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        written = exc.filename2 or exc.filename
        where = f" writing {final_path(str(written))}" if written else ""
        return RunError(f"no space left on the device{where}; free space on that disk or choose another -o")
    where = f" ({final_path(str(exc.filename))})" if exc.filename else ""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RunError(f"permission denied{where}; choose a writable -o or fix the folder's permissions")
    return RunError(f"{exc.strerror or exc}{where}")


def interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or SIGTERM as the CLI maps it) behind an exception, if any.

    An interrupt can come back as another error: a pybind11 module's init that a signal stops
    fails with ImportError("initialization failed") from the KeyboardInterrupt, onnxruntime-genai's
    `__init__` then retries the import, which fails with 'type "GeneratorParams" is already
    registered'; a caller may wrap that again (SmokeRunError from it). Both links (`__cause__` and
    the implicit `__context__`, kept even under `from None`) are followed.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return current
        todo.extend(link for link in (current.__cause__, current.__context__) if link is not None)
    return None


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """Inside: an exception raised because of an interrupt (`interruption`) leaves as a
    KeyboardInterrupt, so that the CLI exits 130/143 for it instead of reporting what the
    interrupt broke."""
    try:
        yield
    except Exception as exc:
        if interruption(exc) is None:
            raise
        raise KeyboardInterrupt from exc
