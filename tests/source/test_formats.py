"""The source-format table (gqa_export/source/formats.py): every record is detected by its own
evidence, imported or refused as it says, in the words it says, and docs/prequantized.md's table
is the table's own rendering.

Config-level checks run the real detection and refusal (source/prequantized.py) on each record's
example and variants; the store-level check opens a one-linear checkpoint of each imported format
(written here from the layouts of docs/prequantized.md §3) through source/imported.ImportedStore.
The exact values each reader produces are proven against HF in tests/source/test_prequant_*.py.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gqa_export.errors import InputError
from gqa_export.source import formats, prequantized
from gqa_export.source.format_records import SourceFormat
from gqa_export.source.formats import FORMATS
from gqa_export.source.imported import ImportedStore
from gqa_export.source.weights import WeightStore

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "prequantized.md"
PREFIX = "model.layers.0.mlp.down_proj"
N, K = 8, 128  # K: one group of the examples' group sizes (128; Quark's 32 four times)
IDS = [fmt.name for fmt in FORMATS]


def refusal(name: str, evidence: str, dequantizable: bool = False) -> str:
    """The whole line a refusal says (source/prequantized.py), for the record's name and evidence."""
    if dequantizable:
        return (
            f"this is a pre-quantized {name} checkpoint ({evidence}), which gqa-export does not import as it is; "
            "pass --dequantize to dequantize it exactly and follow --precision (int4/int8 re-quantize it), "
            "or export the model's float checkpoint"
        )
    return (
        f"this is a pre-quantized {name} checkpoint ({evidence}), which gqa-export does not import yet; "
        "export the model's float (fp16/bf16/fp32) checkpoint and choose --precision int4/int8 instead"
    )


def refused(raw: dict[str, Any], folder: Path, dequantize: bool = False) -> str:
    with pytest.raises(InputError) as err:
        prequantized.check_config(raw, folder, dequantize)
    return str(err.value)


def test_names_are_unique_and_every_quant_method_has_one_format():
    assert len(IDS) == len(set(IDS))
    for fmt in FORMATS:
        for method in fmt.methods:
            owners = [f for f in FORMATS if method in f.methods and f.variant(fmt.declaration)]
            assert owners == [fmt], f"{method}: {[f.name for f in owners]}"


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_detected_by_its_own_declaration(fmt: SourceFormat, tmp_path):
    """Its example (or quant_method), every quant_method spelling it lists, and the older keys."""
    assert formats.declared(fmt.declaration) is fmt
    for method in fmt.methods:
        assert formats.declared({**fmt.declaration, "quant_method": method}) is fmt
        assert formats.declared({**fmt.declaration, "quant_method": method.upper()}) is fmt
    for key in fmt.keys:
        assert formats.declared({key: True}) is fmt
    for name, says in fmt.side_files:
        (tmp_path / name).write_text(json.dumps({"bits": 4, "group_size": 128}))
        assert refused({}, tmp_path) == refusal(says, f"it has {name}")
        (tmp_path / name).unlink()


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_detected_by_its_tensors(fmt: SourceFormat):
    """Each tensor ending it lists refuses an undeclared checkpoint, naming what it found."""
    for mark in fmt.tensors:
        assert mark in formats.TENSOR_MARKS
        for name in (PREFIX + mark.ending, f"{PREFIX}.weight{mark.ending}.bitsandbytes__nf4"):
            with pytest.raises(InputError) as err:
                prequantized.check_tensors(["model.embed_tokens.weight", name])
            assert str(err.value) == refusal(mark.says, f"it stores {name}")


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_imported_or_refused_as_it_says(fmt: SourceFormat, tmp_path):
    raw = {"quantization_config": fmt.declaration}
    method = fmt.declaration.get("quant_method", fmt.methods[0])
    declared = f"config.json's quantization_config says quant_method {method!r}"
    if not fmt.imported:
        assert prequantized.imported_config(raw) is None
        assert refused(raw, tmp_path) == refusal(fmt.refusal_name, declared)
        assert refused(raw, tmp_path, dequantize=True) == refusal(fmt.refusal_name, declared)
        return
    nested = {"text_config": raw}
    if fmt.reader is None:  # the family's graph reads it, wherever it is declared
        for config in (raw, nested):
            prequantized.check_config(config, tmp_path)
            assert prequantized.imported_config(config) is None
        return
    if fmt.dequantize:  # read on request only, refused naming the flag otherwise
        assert prequantized.imported_config(raw) is None
        assert refused(raw, tmp_path) == refusal(fmt.refusal_name, declared, dequantizable=True)
    qc = prequantized.imported_config(raw, fmt.dequantize)
    assert qc is not None and formats.declared(qc) is fmt and qc["quant_method"] == fmt.methods[0]
    prequantized.check_config(raw, tmp_path, fmt.dequantize)
    assert prequantized.dequantized_on_request(qc) == fmt.dequantize
    # a multimodal checkpoint's own quantization_config (inside text_config) is not imported yet
    evidence = prequantized.NESTED + ("; --dequantize does not read it" if fmt.dequantize else "")
    assert refused(nested, tmp_path, fmt.dequantize) == refusal(fmt.refusal_name, evidence)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.refuses], ids=[f.name for f in FORMATS if f.refuses])
def test_refused_variants_say_what_the_record_says(fmt: SourceFormat, tmp_path):
    for variant in fmt.refuses:
        raw = {"quantization_config": variant.config(fmt.example)}
        assert formats.declared(raw["quantization_config"]) is fmt, variant.changes
        assert prequantized.imported_config(raw, dequantize=True) is None
        line = refused(raw, tmp_path, dequantize=fmt.dequantize)
        assert line == refusal(
            fmt.refusal_name, variant.why + ("; --dequantize does not read it" if fmt.dequantize else "")
        )
        if fmt.dequantize:
            assert refused(raw, tmp_path) == refusal(fmt.refusal_name, variant.why, dequantizable=True)


def test_unknown_quantization_is_refused_naming_it(tmp_path):
    for qc, name, evidence in (
        (
            {"quant_method": "brand-new"},
            "'brand-new'",
            "config.json's quantization_config says quant_method 'brand-new'",
        ),
        ({"bits": 4}, "'None'", "config.json's quantization_config says quant_method None"),
        ("int4", "an unknown format", "config.json's quantization_config is 'int4'"),
    ):
        assert refused({"quantization_config": qc}, tmp_path) == refusal(name, evidence)


# --- store level: a one-linear checkpoint of each imported format, read through ImportedStore ---


def _words(q: np.ndarray, bits: int) -> np.ndarray:
    """uint codes [..., M] packed into int32 words along the last axis, low bits first."""
    per = 32 // bits
    q = q.astype(np.uint32).reshape(*q.shape[:-1], -1, per)
    words = np.zeros(q.shape[:-1], np.uint32)
    for j in range(per):
        words |= q[..., j] << np.uint32(bits * j)
    return words.view(np.int32)


def _bnb_state() -> np.ndarray:
    state = {"shape": [N, K], "blocksize": 64, "dtype": "float32", "quant_type": "nf4"}
    return np.frombuffer(json.dumps(state).encode(), np.uint8)


_RNG = np.random.default_rng(0)
_CODES = _RNG.integers(0, 16, (N, K))
_SCALES = (_RNG.random((1, N)) + 0.5).astype(np.float16)
_FP8 = ("F8_E4M3", _RNG.integers(0x30, 0x40, (N, K)).astype(np.uint8))  # e4m3 codes of 0.5 .. 1.875
# record name -> P's tensors (suffix -> array, or (safetensors dtype, raw array))
TENSORS: dict[str, dict[str, Any]] = {
    "GPTQ": {
        ".qweight": _words(_CODES, 4).T.copy(),
        ".qzeros": _words(np.full((1, N), 7), 4),
        ".scales": _SCALES,
        ".g_idx": np.zeros(K, np.int32),
    },
    "AWQ": {".qweight": _words(_CODES.T, 4), ".qzeros": _words(np.full((1, N), 8), 4), ".scales": _SCALES},
    "compressed-tensors pack-quantized": {
        ".weight_packed": _words(_CODES, 4),
        ".weight_scale": _SCALES.T.copy(),
        ".weight_shape": np.array([N, K], np.int64),
    },
    "compressed-tensors float-quantized": {".weight": _FP8, ".weight_scale": _SCALES.T.astype(np.float32)},
    "Quark": {
        ".weight": _words(_CODES.T, 4),
        ".weight_scale": np.repeat(_SCALES, K // 32, axis=0).astype(np.float32),
        ".weight_zero_point": _words(np.full((K // 32, N), 8), 4),
    },
    "FP8": {".weight": _FP8, ".weight_scale_inv": np.array([0.25], np.float32)},
    "bitsandbytes": {
        ".weight": _RNG.integers(0, 256, (N * K // 2, 1)).astype(np.uint8),
        ".weight.absmax": np.ones(N * K // 64, np.float32),
        ".weight.quant_map": np.linspace(-1, 1, 16, dtype=np.float32),
        ".weight.quant_state.bitsandbytes__nf4": _bnb_state(),
    },
    # four output rows a byte (codes + 1 in {0, 1, 2}), one per-tensor scale
    "BitNet": {
        ".weight": _RNG.integers(0, 3, (N // 4, K)).astype(np.uint8) * 0x15,
        ".weight_scale": np.array([2.0], np.float32),
    },
}
STORED = [f for f in FORMATS if f.reader is not None]
DTYPES = {np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8",
          np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}  # fmt: skip


def write_checkpoint(folder: Path, tensors: dict[str, Any]) -> Path:
    header, data = {}, b""
    for suffix, value in {".placeholder": np.zeros(1, np.float32), **tensors}.items():
        dtype, array = value if isinstance(value, tuple) else (DTYPES[value.dtype], value)
        raw = np.ascontiguousarray(array).tobytes()
        header[PREFIX + suffix] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data)
    return folder


def test_every_imported_format_has_a_store_case():
    assert sorted(TENSORS) == sorted(f.name for f in STORED)


@pytest.mark.parametrize("fmt", STORED, ids=[f.name for f in STORED])
def test_imported_through_its_reader(fmt: SourceFormat, tmp_path):
    """The store shows one float P.weight [N, K], hides every tensor of P, keeps the integers
    where the record says MatMulNBits takes them, and the undeclared checkpoint is refused by its
    tensors."""
    assert fmt.reader is not None
    base = WeightStore.open(write_checkpoint(tmp_path, TENSORS[fmt.name]))
    with pytest.raises(InputError, match="pre-quantized"):
        prequantized.check_tensors(base.names())
    qc = prequantized.imported_config({"quantization_config": fmt.declaration}, fmt.dequantize)
    assert qc is not None
    store = ImportedStore(base, qc)
    weight = f"{PREFIX}.weight"
    assert store.format is fmt and store.names() == [f"{PREFIX}.placeholder", weight]
    assert store.info(weight).shape == (N, K) and store.virtual() == [weight]
    assert (store.native(weight) is not None) == fmt.reader.integers
    assert np.isfinite(store.read(weight)).all() and np.any(store.read(weight))
    prequantized.check_tensors(store.names())  # nothing of the format is left for the tensor check


@pytest.mark.parametrize("fmt", STORED, ids=[f.name for f in STORED])
def test_an_imported_format_hides_every_tensor_that_marks_it(fmt: SourceFormat):
    """Else its own checkpoint, declared and imported, would be refused by check_tensors."""
    assert fmt.reader is not None
    for mark in fmt.tensors:
        assert any(mark.found_in(PREFIX + hidden) for hidden in fmt.reader.hidden), mark.ending


def test_inspect_names_the_docs_of_the_reported_format():
    from gqa_export.check.report import _imported

    entry = {"source_format": "compressed-tensors", "imported": {}}
    summary = _imported(SimpleNamespace(manifest={"options": {"imported_quantization": entry}}))  # type: ignore[arg-type]
    assert summary is not None and summary["docs"] == "docs/prequantized.md §3.5, docs/prequantized.md §3.8"


# --- docs/prequantized.md's table is the table's rendering ---

BEGIN = "<!-- formats table: rendered from gqa_export/source/formats.py by tests/source/test_formats.py -->"
END = "<!-- end of formats table -->"


def _code(items: list[str]) -> str:
    return ", ".join(f"`{item}`" for item in items)


def _declared_by(fmt: SourceFormat) -> str:
    ways = [_code([f"quant_method: {m}" for m in fmt.methods])] if fmt.methods else []
    if fmt.keys:
        ways.append(_code(list(fmt.keys)) + " without a quant_method")
    return "; ".join(ways + [f"`{name}` (refused)" for name, _ in fmt.side_files])


def _how(fmt: SourceFormat) -> str:
    if not fmt.imported:
        return "refused"
    if fmt.reader is not None and fmt.reader.integers:
        how = "integers into MatMulNBits"
    else:
        how = "dequantized exactly, then `--precision`"
    return how + (", with `--dequantize` only" if fmt.dequantize else "")


def render() -> str:
    """Imported formats one row each, the refused ones in a sentence, then every refused variant."""
    lines = [
        BEGIN,
        "",
        "| format | declared by | tensors | read by | imported as | docs |",
        "|---|---|---|---|---|---|",
    ]
    for fmt in (f for f in FORMATS if f.imported):
        tensors = _code([mark.ending.lstrip(".") for mark in fmt.tensors])
        lines.append(f"| {fmt.name} | {_declared_by(fmt)} | {tensors} | `{fmt.read_in}` | {_how(fmt)} | {fmt.docs} |")
    never = []
    for fmt in (f for f in FORMATS if not f.imported):
        tensors = f"; tensors {_code([m.ending.lstrip('.') for m in fmt.tensors])}" if fmt.tensors else ""
        never.append(f"{fmt.name} ({_declared_by(fmt)}{tensors})")
    lines += ["", f"Refused wherever they are declared: {'; '.join(never)}.", ""]
    lines += ["| format | variant (its example changed) | refused as |", "|---|---|---|"]
    for fmt in FORMATS:
        lines += [f"| {fmt.name} | {_changes(r.changes)} | {r.why} |" for r in fmt.refuses]
    return "\n".join([*lines, "", END])


def _changes(changes: Any) -> str:
    return ", ".join(f"`{key}: {json.dumps(value)}`" for key, value in changes.items())


def test_docs_table_is_the_records():
    text = DOCS.read_text()
    found = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), text, re.S)
    assert found, f"docs/prequantized.md lacks the formats table; put this in §1:\n{render()}"
    assert found.group(0) == render(), (
        f"docs/prequantized.md's formats table differs from FORMATS; replace it by:\n{render()}"
    )


# --- checkpoint file formats (GGUF): recognized by the file, read by their own package ---


@pytest.mark.parametrize("fmt", formats.FILE_FORMATS, ids=[f.name for f in formats.FILE_FORMATS])
def test_a_file_format_is_recognized_by_its_name_or_magic_and_names_its_reader(fmt: SourceFormat, tmp_path):
    """A MODEL file is the format's by suffix (any case) or by its first bytes; a folder by the
    files it holds; its reader package offers what source/fetch.py and source/checkpoint.py call.
    A config.json declaring its quant_method is still refused (it holds no such file's tensors)."""
    assert fmt.file is not None
    named = tmp_path / f"m{fmt.file.suffixes[0].upper()}"
    named.write_bytes(b"\0" * 8)
    magic = tmp_path / "model.bin"
    magic.write_bytes(fmt.file.magic + b"\0" * 8)
    other = tmp_path / "model.safetensors"
    other.write_bytes(b"\0" * 8)
    assert formats.file_format(named) is fmt and formats.file_format(magic) is fmt
    assert formats.file_format(other) is None and formats.file_format(tmp_path) is None
    assert formats.folder_file_format(tmp_path) is None  # the suffix is matched case-sensitively in a folder
    (tmp_path / f"m{fmt.file.suffixes[0]}").write_bytes(b"")
    assert formats.folder_file_format(tmp_path) is fmt
    reader = fmt.file.module()
    assert all(callable(getattr(reader, f)) for f in ("in_folder", "materialize", "open_store", "remove_made"))
    if fmt.methods:
        assert not fmt.imported
        assert refused({"quantization_config": fmt.declaration}, tmp_path) == refusal(
            fmt.refusal_name, f"config.json's quantization_config says quant_method '{fmt.methods[0]}'"
        )
