"""Bad GGUF input: one line, exit 2, nothing at -o and no config/tokenizer folder left behind.

Each file is a correct GGUF of the trained tiny Llama (Q8_0) broken the way files break: cut
short, the wrong magic, a tensor type the reader does not know, a header whose tensor count
disagrees with the file (one fewer: GGUFReader alone would read every tensor shifted; one more),
no tokenizer, an architecture gqa-export does not import, IQ4_NL tensors without --dequantize, a
folder with several GGUFs and no --gguf-file, a split file with a part missing.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from common import assert_clean, assert_fails, invoke
from gguf_models import write_gguf

TRAINED = Path(__file__).parent.parent / "data" / "tiny-trained"


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_gguf(TRAINED, tmp_path_factory.mktemp("good") / "tiny-Q8_0.gguf", "Q8_0")


def _made_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("gqa-export-gguf-*")}


def _copy(good: Path, folder: Path, name: str = "model.gguf") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(good.read_bytes())
    return path


def _tensor_type_offset(path: Path, index: int = 0) -> int:
    """Byte offset of tensor `index`'s GGML type field in the header."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    fld = reader.tensors[index].field
    return int(fld.offset) + sum(int(p.nbytes) for p in fld.parts[:4])


def _patch(path: Path, offset: int, fmt: str, value: int) -> None:
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    path.write_bytes(bytes(raw))


def _build_fails(tmp_path: Path, model: Path, message: str, *extra: str) -> None:
    before = _made_folders()
    out = tmp_path / "out"
    result = invoke("build", model, "-o", out, "--no-smoke", *extra)
    assert_fails(result, 2, message)
    assert_clean(tmp_path, out)
    assert _made_folders() <= before, f"left behind: {sorted(_made_folders() - before)}"


def test_truncated(good, tmp_path):
    path = _copy(good, tmp_path / "in")
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.7)])
    _build_fails(tmp_path, path, "is truncated")


def test_wrong_magic(good, tmp_path):
    path = _copy(good, tmp_path / "in")
    path.write_bytes(b"GGUX" + path.read_bytes()[4:])
    _build_fails(tmp_path, path, "is not a GGUF file")


def test_unknown_tensor_type(good, tmp_path):
    path = _copy(good, tmp_path / "in")
    _patch(path, _tensor_type_offset(path), "<I", 99)
    _build_fails(tmp_path, path, "GGML type 99")


@pytest.mark.parametrize(("delta", "message"), [(-1, "tensor count disagrees"), (1, "corrupt")])
def test_tensor_count_mismatch(good, tmp_path, delta, message):
    path = _copy(good, tmp_path / "in")
    count = struct.unpack_from("<Q", path.read_bytes(), 8)[0]
    _patch(path, 8, "<Q", count + delta)
    _build_fails(tmp_path, path, message)


def test_no_tokenizer(tmp_path):
    (tmp_path / "in").mkdir()
    path = write_gguf(TRAINED, tmp_path / "in" / "m.gguf", "Q8_0", tokenizer=False)
    _build_fails(tmp_path, path, "has no tokenizer")


def test_architecture_not_imported(good, tmp_path):
    path = _copy(good, tmp_path / "in")
    raw = path.read_bytes()
    at = raw.index(b"general.architecture") + len(b"general.architecture") + 4 + 8  # key, type, string length
    assert raw[at : at + 5] == b"llama"
    path.write_bytes(raw[:at] + b"mamba" + raw[at + 5 :])
    _build_fails(tmp_path, path, "architecture 'mamba'")


def test_iq_types_need_dequantize(tmp_path):
    """IQ4_NL blocks have no exact MatMulNBits form: refused in one line naming the type and the flag."""

    def iq4_nl_for_down(name: str, shape: tuple[int, ...]) -> str:
        return "IQ4_NL" if name.endswith("ffn_down.weight") else ("F32" if len(shape) < 2 else "Q8_0")

    (tmp_path / "in").mkdir()
    path = write_gguf(TRAINED, tmp_path / "in" / "m.gguf", iq4_nl_for_down)
    _build_fails(tmp_path, path, "IQ4_NL tensors")


def test_several_ggufs_need_gguf_file(good, tmp_path):
    folder = tmp_path / "in"
    _copy(good, folder, "a.gguf")
    _copy(good, folder, "b.gguf")
    _build_fails(tmp_path, folder, "choose one with --gguf-file")
    _build_fails(tmp_path, folder, "--gguf-file c.gguf is not in", "--gguf-file", "c.gguf")


def test_split_part_missing(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_gguf(TRAINED, folder / "m.gguf", "Q8_0", split_max_tensors=8)
    parts = sorted(folder.glob("*.gguf"))
    assert len(parts) == 3 and parts[0].name == "m-00001-of-00003.gguf", [p.name for p in parts]
    parts[1].unlink()
    _build_fails(tmp_path, parts[0], "m-00002-of-00003.gguf is missing")


def test_random_bytes_after_a_good_header_do_not_pass_silently(good, tmp_path):
    """Garbage appended after the last tensor: bytes no tensor accounts for (a wrong count or a bad copy)."""
    path = _copy(good, tmp_path / "in")
    path.write_bytes(path.read_bytes() + np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    _build_fails(tmp_path, path, "belong to no tensor")
