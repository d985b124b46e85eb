"""A GGUF file (or a split set) opened, checked, and read as metadata plus memory-mapped tensors.

The parsing is llama.cpp's own `gguf` package (`GGUFReader`: the file is one read-only memory map;
a tensor is a numpy view into it, so nothing is read until a block of it is used). Before any of
it is trusted, the layout is checked here, because GGUFReader itself accepts a file whose header
claims fewer tensors than it holds (the data section then starts inside the last tensor's
description and every tensor silently reads shifted bytes): each tensor must start inside the data
section, at an aligned offset, end inside the file, not overlap another, and the data must
account for the whole file up to the alignment padding. Every failure is one line naming the file
and what is wrong (docs/gguf.md §6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError

MAGIC = b"GGUF"
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# metadata arrays of this many entries or more are read lazily (a 150k-entry vocabulary)
TOKEN_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


@dataclass(frozen=True)
class GgufTensor:
    """One tensor as the file stores it: GGML type name, shape in numpy (row-major) order, raw bytes."""

    name: str
    type_name: str  # "Q4_K", "F16", ...
    type_id: int
    shape: tuple[int, ...]  # numpy order: [..., rows, K]; GGUF's ne[] reversed
    data: np.ndarray = field(repr=False, compare=False)  # uint8 [..., rows, bytes per row] or float [...]
    file: Path = field(compare=False, default=Path())
    offset: int = 0  # of its first byte in `file`

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class GgufFile:
    """The metadata (key -> python value) and tensors (name -> GgufTensor) of one GGUF model,
    read from one file or from every part of a split set (metadata from the first part)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._readers: list[Any] = [_open_reader(p) for p in paths]
        self.metadata: dict[str, Any] = _fields(self._readers[0])
        self.tensors: dict[str, GgufTensor] = {}
        # each part's memory map, for dropping a tensor's pages from RSS once it is read
        self.maps: dict[Path, Any] = {}
        for path, reader in zip(paths, self._readers, strict=True):
            self.maps[path] = getattr(reader.data, "_mmap", None)
            for tensor in _tensors(path, reader):
                if tensor.name in self.tensors:
                    raise InputError(f"tensor '{tensor.name}' appears twice in {_names(paths)}; the file is corrupt")
                self.tensors[tensor.name] = tensor
        _check_split(paths, self.metadata, len(self.tensors))

    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise InputError(f"{self.path.name} has no general.architecture key; it is not a llama.cpp model file")
        return arch

    def key(self, name: str, default: Any = None) -> Any:
        """`{arch}.name` (or a full key such as `tokenizer.ggml.bos_token_id`)."""
        full = name if "." in name and name.split(".", 1)[0] in ("general", "tokenizer", "split") else None
        return self.metadata.get(full or f"{self.architecture}.{name}", default)

    def file_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.paths)


def _open_reader(path: Path) -> Any:
    """GGUFReader over `path`, after the checks its own parsing does not make (module doc)."""
    from gguf import GGUFReader

    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    if head != MAGIC:
        raise InputError(
            f"{path.name} is not a GGUF file (it starts with {head!r}, not {MAGIC!r}); pass a .gguf model file"
        )
    if size < 24:
        raise InputError(f"{path.name} is truncated (only {size} bytes, shorter than a GGUF header); download it again")
    try:
        reader = GGUFReader(path)
    except ValueError as exc:  # an unknown tensor type is one: say which
        text = str(exc)
        unknown = re.search(r"(\d+)\)? is not a valid GGMLQuantizationType", text)
        if unknown:
            raise InputError(
                f"{path.name} has a tensor of GGML type {unknown.group(1)}, which the installed gguf package does not "
                "know (a newer llama.cpp type); upgrade `gguf` (pip install -U gguf) or re-quantize the model"
            ) from None
        raise InputError(f"{path.name} is truncated or corrupt ({text}); download it again") from None
    except (IndexError, KeyError, OverflowError, UnicodeDecodeError, MemoryError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise InputError(f"{path.name} is truncated or corrupt ({why}); download it again") from None
    _check_layout(path, reader, size)
    return reader


def _check_layout(path: Path, reader: Any, size: int) -> None:
    """Every tensor inside the data section, aligned, not overlapping, and nothing unaccounted for."""
    start, align = int(reader.data_offset), int(reader.alignment)
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes), t.name) for t in reader.tensors)
    end = start
    for begin, stop, name in spans:
        if begin < start or (begin - start) % align:
            raise InputError(
                f"{path.name}: tensor '{name}' does not start at an aligned offset of the data section; the header's "
                "tensor count or descriptions disagree with the file (corrupt): download it again"
            )
        if begin < end:
            raise InputError(f"{path.name}: tensor '{name}' overlaps the tensor before it; the file is corrupt")
        if stop > size:
            raise InputError(
                f"{path.name} is truncated: tensor '{name}' ends at byte {stop} of a {size}-byte file; "
                "download it again"
            )
        end = stop
    if size - end >= align and spans:
        raise InputError(
            f"{path.name}: {size - end} bytes after the last tensor belong to no tensor the header lists "
            f"({len(spans)} tensors); the header's tensor count disagrees with the file (corrupt): download it again"
        )


def _fields(reader: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        try:
            out[name] = fld.contents()
        except (ValueError, UnicodeDecodeError, IndexError) as exc:
            raise InputError(f"metadata key {name!r} cannot be read ({exc}); the file is corrupt") from None
    return out


def _tensors(path: Path, reader: Any) -> list[GgufTensor]:
    out = []
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out.append(GgufTensor(t.name, t.tensor_type.name, int(t.tensor_type), shape, t.data, path, int(t.data_offset)))
    return out


def _check_split(paths: list[Path], metadata: dict[str, Any], found: int) -> None:
    count = metadata.get("split.count")
    if count is not None and int(count) != len(paths):
        raise InputError(
            f"{paths[0].name} is part 1 of a {count}-part split GGUF but {len(paths)} parts were found; "
            "put every part in the same folder"
        )
    expected = metadata.get("split.tensors.count")
    if expected is not None and int(expected) != found:
        raise InputError(
            f"the split GGUF {paths[0].name} declares {expected} tensors but its parts hold {found}; "
            "a part is missing or corrupt: download them again"
        )


def _names(paths: list[Path]) -> str:
    return paths[0].name if len(paths) == 1 else f"{paths[0].name} (+{len(paths) - 1} parts)"


def split_parts(path: Path) -> list[Path]:
    """Every part of a split GGUF given any one of them (`name-00001-of-00003.gguf`), else [path]."""
    match = SPLIT_NAME.match(path.name)
    if not match:
        return [path]
    count = int(match.group("count"))
    parts = [path.with_name(f"{match.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise InputError(
            f"{path.name} is one part of a {count}-part split GGUF, but {missing[0]} is missing from {path.parent}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + "; download every part"
        )
    return parts


_OPENED: dict[tuple[str, int, int], GgufFile] = {}


def open_gguf(path: Path) -> GgufFile:
    """Open a GGUF model file (any part of a split set opens the whole set). Opened once per
    process: the folder writing and the weight store share one parse of the metadata."""
    parts = split_parts(path)
    try:
        stat = parts[0].stat()
    except OSError as exc:
        raise InputError(f"cannot read {parts[0]}: {exc.strerror}") from None
    key = (str(parts[0].resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _OPENED:
        _OPENED[key] = GgufFile(parts)
    return _OPENED[key]
