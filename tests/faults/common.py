"""Helpers shared by the fault-injection tests: invoking the CLI and checking the failure contract.

The contract every fault asserts:
- the documented exit code (2 bad input; 1 a failed run or IO: disk full, permission denied,
  memory; 130 SIGINT; 143 SIGTERM);
- exactly one line starting with "error:", no traceback, and the message (on that line) says
  what happened;
- nothing at -o (or, with --overwrite over an existing package, the old package byte for byte);
- no `.partial-`, `.old-`, `.trash-`, `.swap-` (journal) or `.float-reference-` entry left next to -o.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
import traceback
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from gqa_export.cli import app

runner = CliRunner()
MARKERS = (".partial-", ".old-", ".trash-", ".swap-", ".float-reference-")
# the repository whose gqa_export these tests import: subprocesses must run the same code
REPO = Path(__import__("gqa_export").__file__).resolve().parent.parent


def invoke(*args: object, env: dict[str, str] | None = None) -> Result:
    """The CLI in this process (CliRunner): output is stdout and stderr in order."""
    return runner.invoke(app, [str(a) for a in args], env=env)


def crashed(result: Result) -> str | None:
    """The traceback of an exception that escaped the command (CliRunner swallows it), else None."""
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        return None
    assert result.exc_info is not None
    return "".join(traceback.format_exception(*result.exc_info))


def squash(text: str) -> str:
    """Text without whitespace: rich wraps long notes at the console width, anywhere in a path."""
    return re.sub(r"\s+", "", text)


def error_line(output: str, code: int, returncode: int, message: str | re.Pattern[str]) -> str:
    """Check the one-line failure contract on a command's combined output; return the error line."""
    lines = output.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    context = f"exit {returncode}, output:\n{output[-3000:]}"
    assert "Traceback" not in output, f"a traceback was printed; {context}"
    assert returncode == code, f"expected exit {code}; {context}"
    assert len(errors) == 1, f"expected exactly one 'error:' line, got {len(errors)}; {context}"
    tail = [line for line in lines[lines.index(errors[0]) + 1 :] if line.strip()]
    assert not tail, f"the error message is not one line (continues with {tail[:3]}); {context}"
    found = re.search(message, errors[0]) if isinstance(message, re.Pattern) else message in errors[0]
    assert found, f"the error line does not say {message!r}; {context}"
    return errors[0]


def assert_fails(result: Result, code: int, message: str | re.Pattern[str]) -> str:
    """An in-process invocation failed as the contract says (see module docstring)."""
    trace = crashed(result)
    assert trace is None, f"uncaught {type(result.exception).__name__} (exit {result.exit_code}):\n{trace}"
    line = error_line(result.output, code, result.exit_code, message)
    assert line in result.stderr, "the error line must go to stderr"
    return line


def leftovers(parent: Path) -> list[str]:
    """Staging, backup and float-reference folders anywhere under `parent`."""
    if not parent.exists():
        return []
    return sorted(str(p.relative_to(parent)) for p in parent.rglob("*") if any(m in p.name for m in MARKERS))


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path) -> sha256: 'intact' means this is unchanged."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = "symlink -> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def assert_clean(parent: Path, out: Path, before: dict[str, str] | None = None) -> None:
    """Nothing at `out` (or, given `before`, `out` exactly as it was) and no leftovers in `parent`."""
    if before is None:
        assert not out.exists() and not out.is_symlink(), f"{out} was created: {sorted(os.listdir(out))[:10]}"
    else:
        assert out.is_dir(), f"the existing package at {out} is gone"
        assert tree(out) == before, f"the existing package at {out} changed"
    assert leftovers(parent) == [], f"left behind: {leftovers(parent)}"


# --- safetensors files, crafted by hand: 8-byte little-endian header length, JSON header, data


def read_safetensors(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def write_safetensors(path: Path, header: dict[str, Any], data: bytes) -> None:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment of a CLI subprocess: this repository's package, no network, wide console."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTEST_"))}
    path = [str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env.update(PYTHONPATH=os.pathsep.join(path), HF_HUB_OFFLINE="1", COLUMNS="200", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


PYTHON = sys.executable
