"""Lazy access to a checkpoint's safetensors shards.

The whole checkpoint is never in memory: `WeightStore` only reads headers when it opens (to
validate every shard up front, before any work), and `read()` loads one tensor at a time from a
memory-mapped shard. bf16 tensors come back as `ml_dtypes.bfloat16` numpy arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers numpy.dtype("bfloat16") for safetensors)
import numpy as np
from safetensors import SafetensorError, safe_open

from gqa_export.errors import InputError

INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives and what it is, from the shard header alone."""

    name: str
    shard: Path
    dtype: str
    shape: tuple[int, ...]


class WeightStore:
    """Index of every tensor in a folder's safetensors shards; reads tensors on demand."""

    def __init__(self, tensors: dict[str, TensorInfo]) -> None:
        self._tensors = tensors
        self.reads = 0  # how many tensors were loaded: lets tests prove weights stream once

    @classmethod
    def open(cls, model_dir: Path) -> WeightStore:
        """Validate the index and every shard header of `model_dir`."""
        shards = _shard_files(model_dir)
        tensors: dict[str, TensorInfo] = {}
        for shard in shards:
            for info in _read_header(shard):
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
        try:
            return self._tensors[name]
        except KeyError:
            raise InputError(
                f"weight '{name}' is missing from the checkpoint's safetensors files; "
                "the checkpoint does not match its config.json (or the architecture spec)"
            ) from None

    def read(self, name: str, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> np.ndarray:
        """Load one tensor, or a block of its rows / columns (2-D), as a fresh array.

        Blocks are read through safetensors' slices, so only those bytes are copied out of the
        memory-mapped shard. Every call counts in `reads`.
        """
        info = self.info(name)
        self.reads += 1
        try:
            with safe_open(info.shard, framework="numpy") as f:
                if rows is None and cols is None:
                    return f.get_tensor(name)
                r = slice(*rows) if rows else slice(None)
                c = slice(*cols) if cols else slice(None)
                return f.get_slice(name)[r, c]
        except (SafetensorError, OSError, ValueError) as exc:
            raise InputError(f"cannot read '{name}' from {info.shard}: {exc}") from exc

    def read_slices(self, name: str, *index: slice | int) -> np.ndarray:
        """Load one block of an N-D tensor (e.g. rows of one expert of [E, N, K]) through
        safetensors' slices: only those bytes are copied out of the memory-mapped shard."""
        info = self.info(name)
        self.reads += 1
        try:
            with safe_open(info.shard, framework="numpy") as f:
                return f.get_slice(name)[index]
        except (SafetensorError, OSError, ValueError) as exc:
            raise InputError(f"cannot read '{name}' from {info.shard}: {exc}") from exc

    def checkpoint_dtype(self) -> str:
        """The dominant floating dtype of the checkpoint (by element count), e.g. 'BF16'."""
        counts: dict[str, int] = {}
        for info in self._tensors.values():
            counts[info.dtype] = counts.get(info.dtype, 0) + int(np.prod(info.shape, dtype=np.int64))
        return max(counts, key=counts.__getitem__) if counts else "F32"


def _shard_files(model_dir: Path) -> list[Path]:
    index = model_dir / INDEX_FILE
    if index.exists():
        files = sorted(set(_read_index(index).values()))
        missing = [f for f in files if not (model_dir / f).is_file()]
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


def _read_index(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise InputError(f"{index} is not a valid safetensors index ({exc}); download it again") from exc
    if not isinstance(weight_map, dict):
        raise InputError(f"{index} has no 'weight_map' object; download it again")
    return {str(k): str(v) for k, v in weight_map.items()}


def _read_header(shard: Path) -> list[TensorInfo]:
    """Read a shard's header; safetensors checks that the offsets fit the file's size."""
    try:
        with safe_open(shard, framework="numpy") as f:
            out = []
            for name in f.keys():
                sl = f.get_slice(name)
                out.append(TensorInfo(name, shard, sl.get_dtype(), tuple(sl.get_shape())))
            return out
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"weight shard {shard.name} is corrupt or truncated ({exc}); download it again") from exc
