"""Fuzzed GGUF files (issue #36): the container, its metadata as a config, and `inspect`'s summary.

Two kinds of input: the tiny Llama written as GGUF (tests/gguf_models.py) with bytes overwritten,
cut or inserted in its header and metadata (the first 8 KiB: magic, version, counts, keys, value
types, the tokenizer's arrays); and a GGUF written by llama.cpp's own writer whose Llama keys hold
values of any GGUF type (a string layer count, a negative head count, a float where an int goes,
arrays) or are missing. `open_gguf`, `read_config` and `summarize` must return or refuse in one line.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from fuzzing import count, examples, flipped_bytes, outcome, untouched
from gguf_models import write_gguf
from hypothesis import given
from hypothesis import strategies as st

from gqa_export.errors import GqaExportError
from gqa_export.source.gguf import container
from gqa_export.source.gguf.config import read_config
from gqa_export.source.gguf.container import open_gguf
from gqa_export.source.gguf.summary import summarize

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"
_files = itertools.count()
LLAMA_KEYS = {
    "llama.block_count": 2,
    "llama.context_length": 256,
    "llama.embedding_length": 64,
    "llama.feed_forward_length": 128,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.attention.key_length": 16,
    "llama.rope.freq_base": 10000.0,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.vocab_size": 384,
}


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> bytes:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf").read_bytes()


def _read(path: Path) -> None:
    with untouched(path.parent):
        try:
            opened = outcome("gguf", lambda: open_gguf(path))
            if not isinstance(opened, GqaExportError):
                outcome("gguf", lambda: read_config(opened))
            outcome("gguf", lambda: summarize(path))
        finally:
            container._OPENED.clear()  # one parse per file name in a build; here every file is new


@examples(40)
@given(data=st.data())
def test_flipped_header_bytes_open_or_fail_in_one_line(tiny_gguf, tmp_path, data):
    count("GGUF header bytes")
    path = tmp_path / f"m{next(_files)}.gguf"
    path.write_bytes(data.draw(flipped_bytes(tiny_gguf, limit=8192)))
    _read(path)


VALUES = st.one_of(
    st.integers(-(2**63), 2**64 - 1).map(lambda v: ("int", v)),
    st.floats(allow_nan=True, width=32).map(lambda v: ("float", v)),
    st.text(max_size=8).map(lambda v: ("str", v)),
    st.booleans().map(lambda v: ("bool", v)),
    st.lists(st.integers(-5, 300), min_size=1, max_size=4).map(lambda v: ("ints", v)),  # the writer refuses []
    st.just(("missing", None)),
)


@examples(40)
@given(edits=st.dictionaries(st.sampled_from(sorted(LLAMA_KEYS)), VALUES, min_size=1, max_size=3))
def test_llama_keys_of_any_type_read_or_fail_in_one_line(tmp_path, edits):
    count("GGUF keys")
    import gguf

    path = tmp_path / f"k{next(_files)}.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for key, default in LLAMA_KEYS.items():
        kind, value = edits.get(key, ("float" if isinstance(default, float) else "int", default))
        if kind == "int":
            vtype = gguf.GGUFValueType.UINT32 if 0 <= value < 2**32 else gguf.GGUFValueType.INT64
            vtype = gguf.GGUFValueType.UINT64 if value >= 2**63 else vtype  # what the writer can pack
            writer.add_key_value(key, value, vtype)
        elif kind == "float":
            writer.add_key_value(key, value, gguf.GGUFValueType.FLOAT32)
        elif kind == "str":
            writer.add_key_value(key, value, gguf.GGUFValueType.STRING)
        elif kind == "bool":
            writer.add_key_value(key, value, gguf.GGUFValueType.BOOL)
        elif kind == "ints":
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
    writer.add_tensor("token_embd.weight", np.zeros((384, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _read(path)
