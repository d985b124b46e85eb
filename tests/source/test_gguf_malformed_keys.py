"""A GGUF whose model keys are malformed is refused in one line (issue #36; found by tests/fuzz).

llama.cpp's keys are read as it reads them (int() of the layer count, the width divided by the
head count): a head count of 0 raised ZeroDivisionError, a layer count stored as a string
ValueError, a missing width TypeError, each a traceback out of `build` and `inspect`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gqa_export.errors import InputError
from gqa_export.source.gguf import container
from gqa_export.source.gguf.config import read_config
from gqa_export.source.gguf.container import open_gguf

KEYS = {"llama.block_count": 2, "llama.embedding_length": 64, "llama.attention.head_count": 4}


def _write(path: Path, keys: dict) -> Path:
    import gguf

    writer = gguf.GGUFWriter(path, "llama")
    for key, value in keys.items():
        kind = gguf.GGUFValueType.STRING if isinstance(value, str) else gguf.GGUFValueType.UINT32
        writer.add_key_value(key, value, kind)
    writer.add_tensor("token_embd.weight", np.zeros((8, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"llama.attention.head_count": 0}, "ZeroDivisionError"),
        ({"llama.block_count": "two"}, "ValueError"),
        ({"llama.embedding_length": None}, "TypeError"),
    ],
    ids=["zero-heads", "string-layers", "no-width"],
)
def test_malformed_llama_keys_are_one_line(tmp_path, change, error):
    keys = {k: v for k, v in {**KEYS, **change}.items() if v is not None}
    path = _write(tmp_path / "m.gguf", keys)
    try:
        with pytest.raises(InputError) as info:
            read_config(open_gguf(path))
    finally:
        container._OPENED.clear()
    message = str(info.value)
    assert "\n" not in message and "metadata is missing a key or holds one of the wrong type" in message
    assert error in message and "m.gguf" in message
