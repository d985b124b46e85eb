"""Lazy access to a checkpoint's safetensors shards.

The whole checkpoint is never in memory. `WeightStore.open` reads and checks every shard header up
front (before any work): the header's size, its JSON, every tensor's dtype, shape and byte range
against the file, duplicate names, and an index that may only name files inside the folder.
`read()` then copies one tensor, or a block of it, out of the shard's memory map.

Each shard is mapped once and a tensor's pages stay mapped while the export reads it block by
block: a fresh mapping per read would fault every page in again (a column slab touches a page in
every row; 5x slower measured on the 1B shape's MLPs). Mapped pages count in the process's RSS, so
they are dropped from it (madvise DONTNEED; the page cache keeps them) when the reader says it is
done (`release`), right after a whole-tensor read, and after every block of a tensor bigger than
RELEASE_EACH_BLOCK.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from gqa_export.errors import InputError

INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit; a larger header is refused unread
RELEASE_EACH_BLOCK = 256 << 20
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U64": np.dtype(np.uint64), "U32": np.dtype(np.uint32),
    "U16": np.dtype(np.uint16), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives and what it is, from the shard header alone."""

    name: str
    shard: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int = 0  # of its first byte in the shard file
    nbytes: int = 0


class WeightStore:
    """Index of every tensor in a folder's safetensors shards; reads tensors on demand."""

    def __init__(self, tensors: dict[str, TensorInfo]) -> None:
        self._tensors = tensors
        self._maps: dict[Path, mmap.mmap] = {}
        self._lock = threading.Lock()
        self.reads = 0  # how many tensors were loaded: lets tests prove weights stream once

    @classmethod
    def open(cls, model_dir: Path) -> WeightStore:
        """Validate the index and every shard header of `model_dir`."""
        shards = _shard_files(model_dir)
        tensors: dict[str, TensorInfo] = {}
        for shard in shards:
            for info in _read_header(shard):
                if info.name in tensors:
                    raise InputError(
                        f"tensor '{info.name}' is in both {tensors[info.name].shard.name} and {shard.name}; "
                        "the checkpoint is inconsistent, download it again"
                    )
                tensors[info.name] = info
        index = model_dir / INDEX_FILE
        if index.exists():
            for name, file in _read_index(index).items():
                info = tensors.get(name)
                if info is None or info.shard.name != file:
                    raise InputError(
                        f"tensor '{name}' is listed in {INDEX_FILE} under '{file}' but that shard "
                        "does not hold it; the checkpoint is incomplete or corrupt, download it again"
                    )
        return cls(tensors)

    def names(self) -> list[str]:
        return list(self._tensors)

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def info(self, name: str) -> TensorInfo:
        """A tensor the export uses: present, and of a dtype it can convert (checked here, before
        any graph is built, rather than when the bytes are first read)."""
        try:
            info = self._tensors[name]
        except KeyError:
            raise InputError(
                f"weight '{name}' is missing from the checkpoint's safetensors files; "
                "the checkpoint does not match its config.json (or the architecture spec)"
            ) from None
        if info.dtype not in DTYPES:
            raise InputError(f"weight '{name}' has dtype {info.dtype}, which gqa-export cannot convert")
        return info

    def view(self, name: str) -> np.ndarray:
        """The tensor as a read-only array over the shard's memory map (no copy)."""
        info = self.info(name)
        dtype = DTYPES.get(info.dtype)
        if dtype is None:
            raise InputError(f"weight '{name}' has dtype {info.dtype}, which gqa-export cannot convert")
        try:
            with self._lock:  # the writer's threads may both read (weights written in place)
                mapped = self._maps.get(info.shard)
                if mapped is None:
                    with info.shard.open("rb") as f:
                        mapped = self._maps[info.shard] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            count = info.nbytes // dtype.itemsize
            return np.frombuffer(mapped, dtype, count, info.offset).reshape(info.shape)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read '{name}' from {info.shard}: {exc}") from exc

    def read(self, name: str, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> np.ndarray:
        """Load one tensor, or a block of its rows / columns (2-D), as a fresh array: only those
        bytes are copied out of the mapped shard. Every call counts in `reads`."""
        r = slice(*rows) if rows else slice(None)
        c = slice(*cols) if cols else slice(None)
        return self.read_slices(name, r, c) if rows or cols else self.read_slices(name)

    def read_slices(self, name: str, *index: slice | int) -> np.ndarray:
        """Load one block of an N-D tensor (e.g. rows of one expert of [E, N, K]) as a fresh array."""
        self.reads += 1
        view = self.view(name)
        try:
            block = np.array(view[index] if index else view)
        except OSError as exc:  # the file shrank under the mapping (SIGBUS is not catchable; EIO is)
            raise InputError(f"cannot read '{name}' from {self.info(name).shard}: {exc}") from exc
        if not index or self.info(name).nbytes > RELEASE_EACH_BLOCK:
            self.release(name)  # read whole (done with it), or too big to keep mapped between blocks
        return block

    def release(self, name: str) -> None:
        """Drop the tensor's mapped pages from this process's RSS (they stay in the page cache)."""
        info = self._tensors.get(name)
        mapped = self._maps.get(info.shard) if info is not None else None
        if info is None or mapped is None or not info.nbytes or not hasattr(mapped, "madvise"):
            return
        start = info.offset // mmap.PAGESIZE * mmap.PAGESIZE
        end = min(len(mapped), -(-(info.offset + info.nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
        mapped.madvise(mmap.MADV_DONTNEED, start, end - start)


def _shard_files(model_dir: Path) -> list[Path]:
    index = model_dir / INDEX_FILE
    if index.exists():
        files = sorted(set(_read_index(index).values()))
        try:
            for name in files:
                _check_inside(model_dir, name)
            missing = [f for f in files if not (model_dir / f).is_file()]
        except OSError as exc:  # a name the file system refuses (ENAMETOOLONG), checked before any read
            raise InputError(
                f"{INDEX_FILE} names a shard that cannot be looked up ({exc.strerror}); download the checkpoint again"
            ) from None
        if missing:
            raise InputError(
                f"weight shard '{missing[0]}' listed in {INDEX_FILE} is missing from {model_dir}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + "; download the checkpoint again"
            )
        return [model_dir / f for f in files]
    shards = sorted(model_dir.glob("*.safetensors"))
    if shards:
        return shards
    pickles = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(p.name for p in model_dir.glob("*.pt"))
    hint = (
        f" (found {pickles[0]}: pickle checkpoints are never loaded; convert it to safetensors first)"
        if pickles
        else ""
    )
    raise InputError(f"no .safetensors weights in {model_dir}{hint}")


def _check_inside(model_dir: Path, name: str) -> None:
    """A shard named by the index must be a file of the model folder itself: no path, no `..`,
    no symlink leading out of the folder. Checked before anything is opened."""
    path = model_dir / name
    if Path(name).name != name or name in ("", ".", ".."):
        raise InputError(
            f"{INDEX_FILE} names shard '{name}', which is not a file name inside {model_dir}; "
            "refusing to read outside the model folder"
        )
    target = path.resolve()
    # the HF cache links a snapshot's files to the repository's blobs folder, two levels up
    blobs = model_dir.resolve().parent.parent / "blobs"
    if path.is_symlink() and model_dir.resolve() not in target.parents and target.parent != blobs:
        raise InputError(
            f"shard '{name}' is a symlink out of {model_dir} ({target}); refusing to read outside the model folder"
        )


def _read_index(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise InputError(f"{index} is not a valid safetensors index ({exc}); download it again") from exc
    if not isinstance(weight_map, dict):
        raise InputError(f"{index} has no 'weight_map' object; download it again")
    if not all(isinstance(v, str) for v in weight_map.values()):  # str() of an object is no shard name
        raise InputError(f"{index} maps a tensor to something other than a shard file name; download it again")
    return {str(k): v for k, v in weight_map.items()}


def _read_header(shard: Path) -> list[TensorInfo]:
    """Parse and check a shard's header: size, JSON, each tensor's dtype, shape and byte range."""

    def corrupt(why: str) -> InputError:
        return InputError(f"weight shard {shard.name} is corrupt or truncated ({why}); download it again")

    try:
        size = shard.stat().st_size
        with shard.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise corrupt("shorter than a safetensors header")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise corrupt(f"its header claims {length} bytes")
            raw = f.read(length)
    except OSError as exc:
        raise InputError(f"cannot read weight shard {shard.name}: {exc.strerror}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise corrupt("its header is not JSON") from None
    if not isinstance(header, dict):
        raise corrupt("its header is not a JSON object")
    data_start, out = 8 + length, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            if not isinstance(dtype, str) or not all(isinstance(d, int) and d >= 0 for d in (*shape, begin, end)):
                raise ValueError  # a dtype of any other JSON type (a list) is no key of DTYPES either
            if begin > end:
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise corrupt(f"tensor '{name}' has no valid dtype, shape and data_offsets") from None
        if data_start + end > size:
            raise corrupt(f"tensor '{name}' ends past the end of the file")
        itemsize = DTYPES[dtype].itemsize if dtype in DTYPES else None
        # math.prod on Python ints: a shape of 2**70 is a corrupt header, not an int64 overflow
        if itemsize is not None and math.prod(shape) * itemsize != end - begin:
            raise corrupt(f"tensor '{name}' is {end - begin} bytes, its shape {list(shape)} {dtype} needs more")
        out.append(TensorInfo(str(name), shard, str(dtype), shape, data_start + begin, end - begin))
    return out
