"""Broken checkpoints: shards cut short or lying about their contents, an index that points out of
the model folder, dtypes the exporter cannot convert, a config.json that is not JSON, lacks a key
or contradicts the weights.

Every case: exit 2, one line that names what is wrong, nothing at -o, no staging folder left.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest
from common import assert_clean, assert_fails, invoke, read_safetensors, tree, write_safetensors

SHARD = "model.safetensors"
INDEX = "model.safetensors.index.json"
CORRUPT = "weight shard model.safetensors is corrupt or truncated"
OUTSIDE = "refusing to read outside the model folder"
BIG = "model.layers.0.self_attn.q_proj.weight"  # 16 KB: streamed into the data file
SMALL = "model.norm.weight"  # 256 bytes: stored inside model.onnx


def cut(size: int | str):
    def edit(folder: Path) -> None:
        shard = folder / SHARD
        raw = shard.read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        keep = {"header": 8 + length // 2, "half-data": 8 + length + (len(raw) - 8 - length) // 2, "last-byte": -1}
        shard.write_bytes(raw[: keep.get(size, size)] if size != "last-byte" else raw[:-1])

    return edit


def header_length(value: int, sparse_size: int | None = None):
    """Replace the 8-byte header length; `sparse_size`: grow the file (sparse, no disk used) so the
    header 'fits' and only the size limit can refuse it."""

    def edit(folder: Path) -> None:
        shard = folder / SHARD
        with shard.open("r+b") as f:
            f.write(struct.pack("<Q", value))
            if sparse_size:
                f.truncate(sparse_size)

    return edit


def rewrite(change):
    """Edit the parsed header of the shard (and its data) and write the file back."""

    def edit(folder: Path) -> None:
        header, data = read_safetensors(folder / SHARD)
        header, data = change(header, data)
        write_safetensors(folder / SHARD, header, data)

    return edit


def offsets_past_end(header, data):
    begin, end = header[BIG]["data_offsets"]
    header[BIG]["data_offsets"] = [len(data) - (end - begin) + 64, len(data) + 64]
    return header, data


def offsets_reversed(header, data):
    begin, end = header[BIG]["data_offsets"]
    header[BIG]["data_offsets"] = [end, begin]
    return header, data


def offsets_negative(header, data):
    header[BIG]["data_offsets"] = [-8, header[BIG]["data_offsets"][1]]
    return header, data


def shape_too_big(header, data):
    header[BIG]["shape"] = [header[BIG]["shape"][0] * 2, header[BIG]["shape"][1]]
    return header, data


def dtype_a_list(header, data):
    header[BIG]["dtype"] = []  # found by tests/fuzz: `dtype in DTYPES` raised TypeError (unhashable)
    return header, data


def shape_past_int64(header, data):
    header[BIG]["shape"] = [2**70, 1]  # found by tests/fuzz: np.prod(int64) raised OverflowError
    return header, data


def entry_not_an_object(header, data):
    header[BIG] = 7
    return header, data


def header_text(text: bytes):
    def edit(folder: Path) -> None:
        _, data = read_safetensors(folder / SHARD)
        (folder / SHARD).write_bytes(struct.pack("<Q", len(text)) + text + data)

    return edit


def with_dtype(name: str, dtype: str):
    def change(header, data):
        header[name]["dtype"] = dtype
        return header, data

    return rewrite(change)


def split(duplicate: str, index: bool):
    """Two shards; `duplicate` in both (with an index naming only the second, if asked)."""

    def edit(folder: Path) -> None:
        header, data = read_safetensors(folder / SHARD)
        (folder / SHARD).unlink()
        names = [n for n in header if n != "__metadata__"]
        halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2], "model-00002-of-00002.safetensors": []}
        halves["model-00002-of-00002.safetensors"] = [n for n in names if n not in halves[next(iter(halves))]]
        halves["model-00002-of-00002.safetensors"].append(duplicate)
        if duplicate in halves["model-00002-of-00002.safetensors"][:-1]:
            halves["model-00001-of-00002.safetensors"].append(duplicate)
        weight_map = {}
        for file, members in halves.items():
            part, blob = {}, b""
            for name in members:
                begin, end = header[name]["data_offsets"]
                part[name] = {**header[name], "data_offsets": [len(blob), len(blob) + end - begin]}
                blob += data[begin:end]
                weight_map[name] = file
            write_safetensors(folder / file, part, blob)
        if index:
            (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    return edit


def index_naming(shard_name):
    """An index whose weight_map names `shard_name(folder)` for every tensor; the real shard is
    moved where that name points (so the file exists: only the check can refuse it)."""

    def edit(folder: Path) -> None:
        header, _ = read_safetensors(folder / SHARD)
        name = shard_name(folder)
        target = (folder / name) if not os.path.isabs(name) else Path(name)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            (folder / SHARD).rename(target)
        else:
            (folder / SHARD).unlink()
        weight_map = {n: name for n in header if n != "__metadata__"}
        (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    return edit


def symlinked_shard(folder: Path) -> None:
    header, _ = read_safetensors(folder / SHARD)
    outside = folder.parent / "elsewhere" / "stolen.safetensors"
    outside.parent.mkdir()
    (folder / SHARD).rename(outside)
    (folder / "model-00001-of-00001.safetensors").symlink_to(outside)
    weight_map = {n: "model-00001-of-00001.safetensors" for n in header if n != "__metadata__"}
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def index_text(text: str):
    def edit(folder: Path) -> None:
        (folder / INDEX).write_text(text)

    return edit


SHARD_FAULTS = {
    "empty-file": (cut(0), CORRUPT),
    "4-bytes": (cut(4), CORRUPT),
    "cut-in-header": (cut("header"), CORRUPT),
    "cut-in-data": (cut("half-data"), CORRUPT),
    "last-byte-missing": (cut("last-byte"), CORRUPT),
    "header-length-2**40": (header_length(2**40), CORRUPT),
    "header-length-2**40-sparse-file": (header_length(2**40, sparse_size=2**40 + 4096), CORRUPT),
    "header-length-2**64-1": (header_length(2**64 - 1), CORRUPT),
    "offsets-past-end": (rewrite(offsets_past_end), f"tensor '{BIG}' ends past the end of the file"),
    "offsets-reversed": (rewrite(offsets_reversed), f"tensor '{BIG}' has no valid dtype, shape and data_offsets"),
    "offsets-negative": (rewrite(offsets_negative), f"tensor '{BIG}' has no valid dtype, shape and data_offsets"),
    "shape-bigger-than-bytes": (rewrite(shape_too_big), f"tensor '{BIG}'"),
    "entry-not-an-object": (rewrite(entry_not_an_object), f"tensor '{BIG}'"),
    "dtype-a-list": (rewrite(dtype_a_list), f"tensor '{BIG}' has no valid dtype, shape and data_offsets"),
    "shape-past-int64": (rewrite(shape_past_int64), f"tensor '{BIG}' is"),
    "header-not-json": (header_text(b"{not json!}     "), "its header is not JSON"),
    "header-not-utf8": (header_text(b'{"\xff\xfe": 1}  '), "its header is not JSON"),
    "header-a-list": (header_text(b"[1, 2, 3]       "), "its header is not a JSON object"),
    "duplicate-across-shards": (split(BIG, index=False), f"tensor '{BIG}' is in both"),
    "duplicate-across-shards-indexed": (split(BIG, index=True), f"tensor '{BIG}' is in both"),
    "index-dotdot": (index_naming(lambda f: "../outside.safetensors"), OUTSIDE),
    "index-absolute": (index_naming(lambda f: str(f.parent / "abs" / "outside.safetensors")), OUTSIDE),
    "index-subfolder": (index_naming(lambda f: "sub/model.safetensors"), OUTSIDE),
    "index-symlink-out": (symlinked_shard, OUTSIDE),
    "index-not-json": (index_text("{nope"), "is not a valid safetensors index"),
    # found by the long fuzz run: an object as a shard name (its str() 800 characters, ENAMETOOLONG)
    # and a name too long for the file system raised OSError tracebacks
    "index-shard-an-object": (index_text('{"weight_map": {"w": {"a": 1}}}'), "something other than a shard file name"),
    "index-shard-name-too-long": (
        index_text('{"weight_map": {"w": "' + "x" * 300 + '.safetensors"}}'),
        "cannot be looked up",
    ),
    "index-weight-map-a-list": (index_text('{"weight_map": ["model.safetensors"]}'), "weight_map"),
    "index-names-missing-shard": (
        index_text(json.dumps({"weight_map": {BIG: "model-00009-of-00009.safetensors"}})),
        "weight shard 'model-00009-of-00009.safetensors' listed in",
    ),
    f"dtype-C64-{BIG}": (with_dtype(BIG, "C64"), f"weight '{BIG}' has dtype C64, which gqa-export cannot convert"),
    f"dtype-F4-{BIG}": (with_dtype(BIG, "F4"), f"weight '{BIG}' has dtype F4, which gqa-export cannot convert"),
    f"dtype-C64-{SMALL}": (
        with_dtype(SMALL, "C64"),
        f"weight '{SMALL}' has dtype C64, which gqa-export cannot convert",
    ),
    "dtype-C64-lm_head.weight": (
        with_dtype("lm_head.weight", "C64"),
        "weight 'lm_head.weight' has dtype C64, which gqa-export cannot convert",
    ),
}


@pytest.mark.parametrize("fault", list(SHARD_FAULTS))
def test_broken_weights(model, tmp_path, fault):
    edit, message = SHARD_FAULTS[fault]
    edit(model)
    out = tmp_path / "pkg"
    try:
        result = invoke("build", model, "-o", out, "--no-smoke")
        assert_fails(result, 2, message)
        assert_clean(tmp_path, out)
    finally:
        if (model / SHARD).is_file() and (model / SHARD).stat().st_size > 1 << 30:
            (model / SHARD).unlink()  # the sparse 1 TiB file: no space used, but no need to keep it


def test_outside_file_named_by_the_index_is_never_opened(model, tmp_path, monkeypatch):
    """The traversal check runs before anything is opened: the file outside is not even read."""
    index_naming(lambda f: "../outside.safetensors")(model)
    opened = []
    real_open = Path.open

    def spy(self, *args, **kwargs):
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    result = invoke("build", model, "-o", tmp_path / "pkg", "--no-smoke")
    monkeypatch.undo()
    assert_fails(result, 2, OUTSIDE)
    assert "outside.safetensors" not in opened


def edit_config(change):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def drop(key):
    return edit_config(lambda c: c.pop(key))


def put(**values):
    return edit_config(lambda c: c.update(values))


def raw_config(data: bytes):
    def edit(folder: Path) -> None:
        (folder / "config.json").write_bytes(data)

    return edit


# message: a regex the one error line must match. A config.json that contradicts the weights may
# be named by the key or as config.json vs the checkpoint: either says what is wrong.
CONFIG_FAULTS = {
    "not-json": (raw_config(b"{not json"), r"config\.json is not valid JSON"),
    "empty": (raw_config(b""), r"config\.json is not valid JSON"),
    "not-utf8": (raw_config(b'{"model_type": "\xff\xfe"}'), r"config\.json is not valid JSON"),
    "a-list": (raw_config(b"[1, 2]"), r"config\.json does not hold a JSON object"),
    "a-folder": (lambda f: ((f / "config.json").unlink(), (f / "config.json").mkdir()), r"config\.json"),
    "missing": (lambda f: (f / "config.json").unlink(), r"has no config\.json"),
    "no-model_type": (drop("model_type"), r"model_type|unsupported architecture"),
    "no-hidden_size": (drop("hidden_size"), r"hidden_size|config\.json"),
    "no-num_hidden_layers": (drop("num_hidden_layers"), r"num_hidden_layers|config\.json"),
    "no-num_attention_heads": (drop("num_attention_heads"), r"num_attention_heads|config\.json"),
    "no-vocab_size": (drop("vocab_size"), r"vocab_size|config\.json"),
    "no-intermediate_size": (drop("intermediate_size"), r"intermediate_size|config\.json"),
    "hidden_size-a-string": (put(hidden_size="big"), r"hidden_size"),
    "num_attention_heads-0": (put(num_attention_heads=0), r"num_attention_heads"),
    "num_hidden_layers-negative": (put(num_hidden_layers=-1), r"num_hidden_layers"),
    "num_key_value_heads-3": (put(num_key_value_heads=3), r"kv heads|num_key_value_heads"),
    "vocab_size-smaller-than-embedding": (put(vocab_size=100), r"vocab_size|config\.json"),
    "intermediate_size-wrong": (put(intermediate_size=96), r"intermediate_size|config\.json"),
    "hidden_size-wrong": (put(hidden_size=96), r"hidden_size|config\.json"),
    # found by tests/fuzz (tracebacks before): transformers 5's strict-dataclass validation error,
    # a C-long overflow on 2**64 layers, architectures not a list, a token id that is an object
    "heads-not-dividing-hidden": (put(num_attention_heads=3), r"not a multiple of the number of attention heads"),
    "num_hidden_layers-2**64": (put(num_hidden_layers=2**64), r"'num_hidden_layers' is 18446744073709551616"),
    "architectures-a-number": (put(architectures=7), r"architectures is 7, not a list of class names"),
    # the long fuzz run: a Falcon config with head_dim, which FalconConfig holds as a read-only property
    "falcon-with-head_dim": (
        put(model_type="falcon", architectures=["FalconForCausalLM"]),
        r"cannot read .*config\.json: property 'head_dim' of 'FalconConfig' object has no setter",
    ),
    # the post-fix fuzz run: a Llama config relabelled as another type whose class lacks a key the spec reads
    # (an AttributeError from read_dims then); the class's own defaults (hidden 2048) can also meet the
    # weights first: either is one line naming what is wrong
    "relabelled-qwen3_5_moe": (
        put(model_type="qwen3_5_moe", architectures=[]),
        r"config\.json \(model_type 'qwen3_5_moe(_text)?'\) has no 'intermediate_size', which the \S+ spec reads"
        r"|config\.json's hidden_size gives 2048 but model\.embed_tokens\.weight is \[384, 64\]; the config does not "
        r"belong to these weights",
    ),
    "generation-bos_token_id-an-object": (
        lambda f: (f / "generation_config.json").write_text('{"bos_token_id": {"a": 1}}'),
        r"a token id in config\.json or generation_config\.json is \{\"a\": 1\}, not an integer",
    ),
}


@pytest.mark.parametrize("fault", list(CONFIG_FAULTS))
def test_broken_config(model, tmp_path, fault):
    edit, message = CONFIG_FAULTS[fault]
    edit(model)
    out = tmp_path / "pkg"
    result = invoke("build", model, "-o", out, "--no-smoke")
    assert_fails(result, 2, re.compile(message))
    assert_clean(tmp_path, out)


@pytest.mark.parametrize("missing", ["tokenizer.json"], ids=["no-tokenizer"])
def test_missing_tokenizer(model, tmp_path, missing):
    """Found only at the package stage: the staging folder (graph and weights written) must go."""
    (model / missing).unlink()
    out = tmp_path / "pkg"
    before = tree(model)
    result = invoke("build", model, "-o", out, "--no-smoke")
    assert_fails(result, 2, "has no tokenizer.json or tokenizer.model")
    assert_clean(tmp_path, out)
    assert tree(model) == before
