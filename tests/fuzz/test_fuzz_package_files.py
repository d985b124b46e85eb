"""Fuzzed package files (issue #36): genai_config.json and manifest.json as `inspect` and `verify`
read them, the overwrite guard's reading of a manifest, and the tokenizer files (tokenizer.json,
tokenizer_config.json, special_tokens_map.json) as the pad-id rules, `run`'s BOS rule, the draft
pairing and `inspect` read them.

One tiny fp32 package is built per module; each example is a copy with one file edited at any
depth (keys dropped, values of any JSON type), or cut short, or not JSON at all.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from fuzzing import cli, count, examples, mutated_json, outcome, untouched
from hypothesis import given
from hypothesis import strategies as st

from gqa_export.check.report import inspect_package
from gqa_export.package.draft import tokenizer_mismatch, tokenizer_parts
from gqa_export.package.ownership import check_replaceable
from gqa_export.package.pad_id import choose_pad_id
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import adds_bos
from gqa_export.runtime.verify import verify
from gqa_export.source.checkpoint import source_dims

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_folders = itertools.count()


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-package") / "pkg"
    build(BuildOptions(str(TINY), out, smoke=False))
    return out


# tokenizer.json is 14 KB of vocabulary: edits go where the parsers look
FOCUS = {"tokenizer.json": ["model", "added_tokens", "post_processor"]}


def edited(draw: st.DrawFn, original: bytes, name: str = "") -> bytes:
    kind = draw(st.sampled_from(["json", "json", "json", "cut", "bytes"]))
    if kind == "json":
        return json.dumps(draw(mutated_json(json.loads(original), FOCUS.get(name)))).encode()
    if kind == "cut":
        return original[: draw(st.integers(0, len(original)))]
    return draw(st.binary(max_size=30))


def _copy(package: Path, tmp_path: Path, name: str, text: bytes) -> Path:
    folder = tmp_path / f"p{next(_folders)}"
    folder.mkdir()
    for file in package.iterdir():
        if file.name == "model.onnx.data":
            (folder / file.name).symlink_to(file)  # read only; the largest file
        elif file.name != name:
            shutil.copy(file, folder / file.name)
    (folder / name).write_bytes(text)
    return folder


@examples(15)
@given(data=st.data())
def test_genai_config_inspect_and_verify(package, tmp_path, data):
    count("genai_config.json")
    text = edited(data.draw, (package / "genai_config.json").read_bytes())
    folder = _copy(package, tmp_path, "genai_config.json", text)
    with untouched(folder):
        outcome("genai_config.json", lambda: inspect_package(folder))
        outcome("genai_config.json", lambda: verify(folder))


@examples(15)
@given(data=st.data())
def test_manifest_verify_and_overwrite_guard(package, tmp_path, data):
    count("manifest.json")
    text = edited(data.draw, (package / "manifest.json").read_bytes())
    folder = _copy(package, tmp_path, "manifest.json", text)
    with untouched(folder):
        outcome("manifest.json", lambda: verify(folder))
        outcome("manifest.json", lambda: check_replaceable(folder))


@examples(20)
@given(data=st.data(), name=st.sampled_from(TOKENIZER_FILES))
def test_tokenizer_files(package, tmp_path, data, name):
    count("tokenizer files")
    text = edited(data.draw, (TINY / name).read_bytes(), name)
    folder = _copy(package, tmp_path, name, text)
    dims = source_dims(TINY)
    with untouched(folder):
        outcome("tokenizer files", lambda: choose_pad_id(dims, folder, lambda row: True))
        outcome("tokenizer files", lambda: adds_bos(folder))
        outcome("tokenizer files", lambda: tokenizer_parts(folder))
        outcome("tokenizer files", lambda: tokenizer_mismatch(package, folder))
        outcome("tokenizer files", lambda: inspect_package(folder))


@examples(3)
@given(data=st.data(), name=st.sampled_from(["genai_config.json", "manifest.json"]))
def test_inspect_and_verify_commands(package, tmp_path, data, name):
    count("inspect/verify CLI")
    folder = _copy(package, tmp_path, name, edited(data.draw, (package / name).read_bytes()))
    with untouched(folder):
        cli("package CLI", "inspect", folder)
        cli("package CLI", "verify", folder)
