"""The `.onnx_adapter` file `gqa-export adapter` writes: sealed, written atomically, replaced only when sealed.

A package folder proves it is gqa-export's by its manifest.json; a single file has nowhere to put
one. onnxruntime's adapter format (a flatbuffer, file identifier `TORT`) holds the parameters and
two integers, `adapter_version` and `model_version`; onnxruntime-genai never reads them and runs the
same logits whatever `model_version` holds (docs/lora.md §4.1). gqa-export writes `model_version`
as the file's seal: the first 31 bits of the sha256 of its parameters (name, element type, dims,
bytes, in name order). `--overwrite` replaces a file only when its seal matches its parameters;
another tool's adapter (2⁻³¹ odds of a match), a PEFT safetensors, a checkpoint or any other file
is refused and left as it was (package/ownership.py).

The file is written to `.NAME.partial-PID-HEX` beside `-o` and renamed into place only when
complete; a failure removes it, and a run killed outright leaves it for the next run for the same
`-o` to remove (its process gone). Without `--overwrite` the rename is a hard link, which fails
when a file appeared at `-o` meanwhile; with it the seal is checked again just before the rename.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.package.ownership import check_file_replaceable
from gqa_export.package.swap import committing, pid_alive

IDENTIFIER = b"TORT"  # bytes 4-8 of every onnxruntime adapter file (flatbuffer file identifier)
ADAPTER_VERSION = 1
SEAL_MASK = 0x7FFFFFFF  # model_version is a signed 32-bit int: the seal stays non-negative
KIND = "an .onnx_adapter"


def seal(parameters: Mapping[str, Any]) -> int:
    """The seal of `parameters` (name -> CPU OrtValue), as written and as read back."""
    digest = hashlib.sha256()
    for name in sorted(parameters):
        value = parameters[name]
        dims = list(value.shape())
        digest.update(name.encode() + b"\0" + struct.pack(f"<ii{len(dims)}q", value.element_type(), len(dims), *dims))
        digest.update(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()))
    return int.from_bytes(digest.digest()[:4], "little") & SEAL_MASK


def foreign(path: Path) -> str | None:
    """Why `path` is not an adapter file gqa-export wrote (None when it is, seal intact)."""
    import onnxruntime as ort

    if not path.is_file():
        return "is not a regular file"
    with path.open("rb") as f:
        head = f.read(8)
    if head[4:8] != IDENTIFIER:
        return "is not an .onnx_adapter file"
    try:
        adapter = ort.AdapterFormat.read_adapter(str(path))
        parameters = adapter.get_parameters()
        matches = adapter.get_model_version() == seal(parameters)
    except Exception as exc:  # onnxruntime raises a plain RuntimeError on a damaged file
        return f"is not a readable .onnx_adapter file ({str(exc).splitlines()[0]})"
    if not matches:
        return "carries no gqa-export seal (written by another tool, an older gqa-export, or changed since)"
    return None


def check_adapter_output(output: Path, overwrite: bool) -> None:
    """Refuse an existing -o that is not a sealed adapter (even with --overwrite), or any existing
    -o without it."""
    check_file_replaceable(output, overwrite, foreign, KIND)


def write_adapter(parameters: Mapping[str, Any], output: Path, overwrite: bool) -> list[str]:
    """Write `parameters` (name -> OrtValue) sealed to `output`, atomically; returns what was
    cleaned up from an earlier killed run."""
    import onnxruntime as ort

    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(ADAPTER_VERSION)
    adapter.set_model_version(seal(parameters))
    adapter.set_parameters(dict(parameters))
    output.parent.mkdir(parents=True, exist_ok=True)
    cleaned = remove_leftovers(output)
    staged = output.with_name(f".{output.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        adapter.export_adapter(str(staged))
        _commit(staged, output, overwrite)
    finally:
        staged.unlink(missing_ok=True)  # nothing half-written is left behind
    return cleaned


def _commit(staged: Path, output: Path, overwrite: bool) -> None:
    with committing(output):  # SIGINT/SIGTERM wait for the one step (package/swap.py)
        if not overwrite:
            try:
                os.link(staged, output)  # atomic: fails if anything appeared at -o during the conversion
                return
            except FileExistsError:
                raise InputError(f"{output} appeared during the conversion; choose another -o") from None
            except OSError:  # a filesystem without hard links
                pass
        check_adapter_output(output, overwrite)  # -o may have changed hands since the first check
        os.replace(staged, output)


def remove_leftovers(output: Path) -> list[str]:
    """Remove `.NAME.partial-PID-HEX` files beside `output` whose process is gone (a SIGKILL or a
    power loss cannot be caught); say what was removed."""
    removed = []
    for path in sorted(output.parent.glob(f".{output.name}.partial-*")):
        pid = path.name.rsplit(".partial-", 1)[1].split("-")[0]
        if pid.isdigit() and path.is_file() and not path.is_symlink() and not pid_alive(int(pid)):
            path.unlink()
            removed.append(f"removed {path}, left by an interrupted run")
    return removed
