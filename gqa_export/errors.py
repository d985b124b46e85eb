"""Error types that carry the CLI's exit code.

Every error a user can fix (bad input, bad options, missing files) is an `InputError`: the CLI
prints its message as one line and exits 2. A package that was built but does not run is a
`SmokeRunError` (exit 1).
"""

from __future__ import annotations


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


def from_os_error(exc: OSError) -> RunError:
    """One sentence for an OSError that escaped a stage: what failed, on which file, what to do."""
    import errno

    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return RunError(f"no space left on the device{where}; free space there or choose another -o")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RunError(f"permission denied{where}; choose a writable -o or fix the folder's permissions")
    return RunError(f"{exc.strerror or exc}{where}")
