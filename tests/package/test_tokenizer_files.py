"""Hand-edited tokenizer files read as the pad-id rules and `run`'s BOS rule read them (issue #36).

Found by tests/fuzz/test_fuzz_package_files.py: a post-processor whose `single` template starts
with a number, an added token whose id is text, a `model` that is a list each raised a TypeError or
ValueError traceback from `build` or `run`. The tokenizer's own loader refuses such files where
it must; these readers take what they understand and ignore the rest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gqa_export.package.pad_id import choose_pad_id
from gqa_export.runtime.run import adds_bos
from gqa_export.source.checkpoint import source_dims

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"


def _with_tokenizer(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "m"
    shutil.copytree(TINY, folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    edit(data)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "tokenizer_config.json").write_text("{}")  # no add_bos_token: tokenizer.json decides
    return folder


def test_a_template_starting_with_a_number_adds_no_bos(tmp_path):
    folder = _with_tokenizer(tmp_path, lambda d: d["post_processor"].update(single=[-2050, True]))
    assert adds_bos(folder) is False
    sequence = {"type": "Sequence", "processors": 3}
    assert adds_bos(_with_tokenizer(tmp_path / "s", lambda d: d.update(post_processor=sequence))) is False


def test_added_tokens_with_text_ids_and_a_list_model_are_skipped(tmp_path):
    dims = source_dims(TINY)
    expected = choose_pad_id(dims, TINY, lambda row: True)
    text_id = _with_tokenizer(tmp_path, lambda d: d["added_tokens"].append({"id": "7", "content": "<pad>"}))
    assert choose_pad_id(dims, text_id, lambda row: True) == expected  # the entry names no row
    no_model = _with_tokenizer(tmp_path / "l", lambda d: d.update(model=["not", "an", "object"]))
    choice = choose_pad_id(dims, no_model, lambda row: True)  # the added tokens alone bound the ids
    assert 0 <= choice.id < dims.vocab_size
