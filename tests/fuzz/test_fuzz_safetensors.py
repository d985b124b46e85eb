"""Fuzzed safetensors shards and index files (issue #36): `WeightStore.open` and every tensor read.

Three kinds of input: a valid two-tensor shard whose JSON header is edited (fields dropped or set
to any JSON value, dtypes and shapes of any kind and size) and written back with a correct length
prefix; the same shard with raw bytes flipped, cut or inserted anywhere in its first 200 bytes;
and a valid index edited likewise. Each must open and read, or fail with a one-line InputError.
"""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path

import numpy as np
from fuzzing import JSON_VALUES, count, examples, flipped_bytes, mutated_json, outcome, untouched
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import save

from gqa_export.errors import GqaExportError
from gqa_export.source.weights import INDEX_FILE, WeightStore

TENSORS = {"a.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "b.bias": np.ones(5, np.float16)}
SHARD = save(TENSORS, metadata={"format": "pt"})
HEADER_LENGTH = struct.unpack("<Q", SHARD[:8])[0]
HEADER = json.loads(SHARD[8 : 8 + HEADER_LENGTH])
DATA = SHARD[8 + HEADER_LENGTH :]
INDEX = {"metadata": {"total_size": len(DATA)}, "weight_map": dict.fromkeys(TENSORS, "model.safetensors")}
_folders = itertools.count()


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / f"m{next(_folders)}"
    folder.mkdir()
    return folder


def _open_and_read(folder: Path) -> None:
    with untouched(folder):
        store = outcome("safetensors", lambda: WeightStore.open(folder))
        if isinstance(store, GqaExportError):
            return
        for name in store.names():
            outcome("safetensors", lambda n=name: store.read(n))


@st.composite
def headers(draw: st.DrawFn) -> dict:
    header = json.loads(json.dumps(HEADER))
    name = draw(st.sampled_from(sorted(header)))
    if name == "__metadata__" or draw(st.booleans()):
        return draw(mutated_json(header))
    entry = header[name]
    field = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
    values = {
        "dtype": st.sampled_from(["F32", "F16", "BF16", "I8", "U8", "F8_E4M3", "BOOL", "C64", "X"]) | JSON_VALUES,
        "shape": st.lists(st.integers(-(2**70), 2**70), max_size=4) | JSON_VALUES,
        "data_offsets": st.lists(st.integers(-(2**70), 2**70), min_size=2, max_size=2) | JSON_VALUES,
    }
    entry[field] = draw(values[field])
    return header


@examples(60)
@given(header=headers(), pad=st.integers(0, 3))
def test_edited_headers_open_or_fail_in_one_line(tmp_path, header, pad):
    count("safetensors header")
    folder = _folder(tmp_path)
    text = (json.dumps(header) + " " * pad).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + DATA)
    _open_and_read(folder)


@examples(60)
@given(raw=flipped_bytes(SHARD, limit=200))
def test_flipped_bytes_open_or_fail_in_one_line(tmp_path, raw):
    count("safetensors bytes")
    folder = _folder(tmp_path)
    (folder / "model.safetensors").write_bytes(raw)
    _open_and_read(folder)


@st.composite
def indexes(draw: st.DrawFn) -> str:
    index = json.loads(json.dumps(INDEX))
    if draw(st.booleans()):
        shard = st.sampled_from(["model.safetensors", "other.safetensors", "../model.safetensors", "", "."])
        index["weight_map"] = draw(
            st.dictionaries(st.sampled_from(["a.weight", "b.bias", "c"]), shard | JSON_VALUES, max_size=3)
        )
    else:
        index = draw(mutated_json(index))
    text = json.dumps(index)
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


@examples(60)
@given(index=indexes())
def test_edited_index_files_open_or_fail_in_one_line(tmp_path, index):
    count("safetensors index")
    folder = _folder(tmp_path)
    (folder / "model.safetensors").write_bytes(SHARD)
    (folder / INDEX_FILE).write_text(index)
    _open_and_read(folder)
