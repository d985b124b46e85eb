"""Planting known bugs into a copy of a built package, to prove that a check fails on them.

Each mutant edits the initializers of the package's graph in place (inline or in the external
data file, at the tensor's own offset), so the broken package is byte for byte the correct one
except for the planted bug: nibble order, scales off by a factor, experts rolled, zero points
swapped, a weight transposed. A check whose bound lets one of these pass cannot fail.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

Change = Callable[[np.ndarray], np.ndarray]
# a bug planted in the export itself: a patch of the graph builder (applied through monkeypatch, so
# undone after the test) or fields of the family's ArchSpec replaced
Plant = Callable[[pytest.MonkeyPatch], None] | Mapping[str, Any]


def build_planted(
    checkpoint: Path, out: Path, monkeypatch: pytest.MonkeyPatch, plant: Plant, spec: str | None = None
) -> Path:
    """Build `checkpoint` into `out` (text decoder, no smoke run) with `plant` in place: a callable
    patches the builder; a mapping replaces fields of the ArchSpec named `spec`. Returns `out`, for
    the caller to hold against HF (a mutant must fail the parity bound the registry row passes)."""
    from gqa_export.arch import SPECS
    from gqa_export.pipeline import BuildOptions, build

    if callable(plant):
        plant(monkeypatch)
    else:
        assert spec is not None, "a spec mutant names the spec it changes"
        monkeypatch.setitem(SPECS, spec, replace(SPECS[spec], **plant))
    build(BuildOptions(str(checkpoint), out, smoke=False, text_only=True))
    return out


def copy_package(package: Path, dest: Path) -> Path:
    shutil.copytree(package, dest)
    return dest


def edited_checkpoint(checkpoint: Path, to: Path, **config: Any) -> Path:
    """A copy of `checkpoint` at `to` whose config.json has `config` merged in (the weights unchanged): a config
    mutant, a stray key, or a value the build must refuse."""
    shutil.copytree(checkpoint, to)
    data = json.loads((to / "config.json").read_text())
    (to / "config.json").write_text(json.dumps({**data, **config}))
    return to


def edit_initializers(package: Path, pattern: str, change: Change, graph_file: str = "model.onnx") -> list[str]:
    """Apply `change` to every initializer whose name matches the fnmatch `pattern`; returns the
    names changed (the caller asserts it is not empty: a mutant that touched nothing proves nothing)."""
    path = package / graph_file
    model = onnx.load(str(path), load_external_data=False)
    changed = []
    for tensor in model.graph.initializer:
        if not fnmatch.fnmatch(tensor.name, pattern):
            continue
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            offset, length = int(info.get("offset", 0)), int(info["length"])
            data_path = package / info["location"]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            with data_path.open("r+b") as f:
                f.seek(offset)
                values = np.frombuffer(f.read(length), dtype=dtype).reshape(tuple(tensor.dims)).copy()
                new = np.ascontiguousarray(change(values)).astype(dtype)
                assert new.nbytes == length, f"{tensor.name}: a mutant must keep the tensor's size"
                f.seek(offset)
                f.write(new.tobytes())
        else:
            values = numpy_helper.to_array(tensor)
            tensor.CopyFrom(
                numpy_helper.from_array(np.ascontiguousarray(change(values)).astype(values.dtype), tensor.name)
            )
        changed.append(tensor.name)
    onnx.save(model, str(path), save_as_external_data=False) if changed else None
    return changed


def swap_nibbles(values: np.ndarray) -> np.ndarray:
    """uint8 packed int4 with the two halves of every byte exchanged (element order inside a byte)."""
    return ((values & 0x0F) << 4) | (values >> 4)


def times(factor: float) -> Change:
    return lambda values: values * factor


def roll_first_axis(values: np.ndarray) -> np.ndarray:
    """Experts (or rows) shifted by one along the first axis: expert e gets e-1's weights."""
    return np.roll(values, 1, axis=0)


def transpose_blocks(values: np.ndarray) -> np.ndarray:
    """A square weight read the wrong way round (rows and columns exchanged)."""
    assert values.ndim >= 2 and values.shape[0] == values.shape[1], values.shape
    return np.swapaxes(values, 0, 1)


def read_for_every_class(monkeypatch: Any, *keys: str) -> None:
    """The mutant: `keys` read wherever a spec asks for them, whether the config's class names them or not (taken
    out of model/class_reads.CLASS_LOCAL_KEYS; its cache is keyed by the tuple, so nothing stale is kept)."""
    from gqa_export.model import class_reads

    monkeypatch.setattr(
        class_reads, "CLASS_LOCAL_KEYS", tuple(k for k in class_reads.CLASS_LOCAL_KEYS if k not in keys)
    )
