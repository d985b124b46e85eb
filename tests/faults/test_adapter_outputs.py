"""`adapter -o FILE`: what it may replace, and how it writes (docs/lora.md §4, package/adapter_file.py).

`--overwrite` replaces only an .onnx_adapter gqa-export wrote (its seal, `model_version`, matches
its parameters). Refused with exit 2, one line, nothing written and every file as it was: -o
inside the PEFT folder or the base package (their own files included), a checkpoint, another
tool's adapter, a sealed adapter changed since, a link. The write goes through a staging file
renamed into place: a failure leaves the old file byte for byte, and a file that appears at -o
during the conversion is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from common import assert_fails, invoke, leftovers, tree

from gqa_export.package import adapter_file

CHECKPOINT = Path(__file__).parent.parent / "data" / "tiny-llama"
TARGETS = ("q_proj", "v_proj")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A multi-LoRA base of the tiny Llama, a PEFT adapter for it and that adapter converted: read only."""
    from lora_models import save_adapter

    from gqa_export.package.adapters import convert_adapter
    from gqa_export.pipeline import BuildOptions, build

    root = tmp_path_factory.mktemp("adapter-outputs")
    build(BuildOptions(str(CHECKPOINT), root / "base", smoke=False, lora_targets=TARGETS))
    peft = save_adapter(root / "peft", CHECKPOINT, list(TARGETS), 4, 8.0, 1)
    sealed = convert_adapter(peft, root / "base", root / "sealed.onnx_adapter").output
    return {"base": root / "base", "peft": peft, "sealed": sealed}


@pytest.fixture
def work(made: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """Copies this test may lose: the base, the PEFT folder, a sealed adapter."""
    return {name: Path(shutil.copytree(p, tmp_path / name) if p.is_dir() else shutil.copy(p, tmp_path / p.name))
            for name, p in made.items()}  # fmt: skip


def adapter(work: dict[str, Path], out: Path, *flags: str, base: Path | None = None):
    return invoke("adapter", work["peft"], "--base", base or work["base"], "-o", out, *flags)


def snapshot(tmp_path: Path) -> dict[str, str]:
    return tree(tmp_path)


def foreign_adapter(path: Path) -> Path:
    """An .onnx_adapter another tool wrote: the same parameters, model_version 1 (no seal)."""
    import onnxruntime as ort

    values = {
        "model.layers.0.self_attn.q_proj.lora_A.weight": ort.OrtValue.ortvalue_from_numpy(np.ones((64, 2), np.float32))
    }
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters(values)
    fmt.export_adapter(str(path))
    return path


def changed(path: Path) -> Path:
    """A sealed adapter with one weight byte changed: still loadable, no longer what gqa-export wrote."""
    import ctypes

    import onnxruntime as ort

    read = ort.AdapterFormat.read_adapter(str(path))  # kept alive: the values may point into it
    value = next(iter(read.get_parameters().values()))
    data = bytearray(path.read_bytes())
    at = data.find(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()))
    assert at > 0
    data[at + 5] ^= 1
    path.write_bytes(bytes(data))
    return path


# (what -o is, the words of the refusal); every case is refused with and without --overwrite
CASES = {
    "PEFT weights": (lambda w, t: w["peft"] / "adapter_model.safetensors", "inside the PEFT adapter folder"),
    "PEFT config": (lambda w, t: w["peft"] / "adapter_config.json", "inside the PEFT adapter folder"),
    "new file in PEFT": (lambda w, t: w["peft"] / "mine.onnx_adapter", "inside the PEFT adapter folder"),
    "link into PEFT": (lambda w, t: link(t / "l.onnx_adapter", w["peft"] / "adapter_model.safetensors"),
                       "inside the PEFT adapter folder"),
    "base weights": (lambda w, t: w["base"] / "model.onnx.data", "inside the base package"),
    "base manifest": (lambda w, t: w["base"] / "manifest.json", "inside the base package"),
    "checkpoint": (lambda w, t: checkpoint(t / "merged"), "is not an .onnx_adapter file"),
    "another tool's adapter": (lambda w, t: foreign_adapter(t / "olive.onnx_adapter"), "carries no gqa-export seal"),
    "changed sealed adapter": (lambda w, t: changed(w["sealed"]), "carries no gqa-export seal"),
    "link to a sealed adapter": (lambda w, t: link(t / "l.onnx_adapter", w["sealed"]), "is a link"),
}  # fmt: skip


def link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def checkpoint(folder: Path) -> Path:
    """A merged checkpoint's weights (the issue's `-o merged/model.safetensors`)."""
    folder.mkdir()
    shutil.copy(CHECKPOINT / "model.safetensors", folder / "model.safetensors")
    return folder / "model.safetensors"


@pytest.mark.parametrize("overwrite", [True, False], ids=["--overwrite", "plain"])
@pytest.mark.parametrize("case", list(CASES))
def test_refused_and_left_byte_for_byte(work, tmp_path, case, overwrite):
    where, words = CASES[case]
    out = where(work, tmp_path)
    before = snapshot(tmp_path)
    result = adapter(work, out, *(["--overwrite"] if overwrite else []))
    assert_fails(result, 2, words)
    assert snapshot(tmp_path) == before, "a file changed or appeared"


def test_base_given_as_its_graph_file(work, tmp_path):
    """`--base base/model.onnx -o base/model.onnx --overwrite`: the graph is the input itself."""
    before = snapshot(tmp_path)
    graph = work["base"] / "model.onnx"
    result = adapter(work, graph, "--overwrite", base=graph)
    assert_fails(result, 2, "inside the base package")
    assert snapshot(tmp_path) == before


def test_replaces_its_own_adapter_only_with_overwrite(work, tmp_path):
    out = tmp_path / "mine.onnx_adapter"
    assert adapter(work, out).exit_code == 0
    first = out.read_bytes()
    assert adapter_file.foreign(out) is None
    assert_fails(adapter(work, out), 2, "exists; pass --overwrite")
    result = adapter(work, out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == first and leftovers(tmp_path) == []


def test_seal_covers_every_parameter_byte(work):
    """A changed byte, another name, another model_version: each breaks the seal."""
    import onnxruntime as ort

    read = ort.AdapterFormat.read_adapter(str(work["sealed"]))
    values = read.get_parameters()
    assert read.get_model_version() == adapter_file.seal(values) != 1
    name = sorted(values)[0]
    array = values[name].numpy().copy()
    array.flat[-1] += 1
    assert adapter_file.seal({**values, name: ort.OrtValue.ortvalue_from_numpy(array)}) != adapter_file.seal(values)
    renamed = {("x" + n if n == name else n): v for n, v in values.items()}
    assert adapter_file.seal(renamed) != adapter_file.seal(values)


def failing_export(monkeypatch, before_export=None):
    """export_adapter that writes half a file and fails as a full disk does (or runs `before_export` first)."""
    import onnxruntime as ort

    real = ort.AdapterFormat.export_adapter

    def export(self, path):
        if before_export is None:
            Path(path).write_bytes(b"half")
            raise OSError(28, "No space left on device")
        before_export()
        real(self, path)

    monkeypatch.setattr(ort.AdapterFormat, "export_adapter", export)


def test_failed_write_keeps_the_old_adapter(work, tmp_path, monkeypatch):
    before = snapshot(tmp_path)
    failing_export(monkeypatch)
    assert_fails(adapter(work, work["sealed"], "--overwrite"), 1, "no space")
    assert snapshot(tmp_path) == before and leftovers(tmp_path) == []


def test_a_file_that_appears_during_the_conversion_is_kept(work, tmp_path, monkeypatch):
    out = tmp_path / "late.onnx_adapter"
    failing_export(monkeypatch, lambda: out.write_text("a user's file\n"))
    assert_fails(adapter(work, out), 2, "appeared during the conversion")
    assert out.read_text() == "a user's file\n" and leftovers(tmp_path) == []


def test_a_sealed_output_that_changes_hands_during_the_conversion_is_kept(work, tmp_path, monkeypatch):
    out = work["sealed"]
    failing_export(monkeypatch, lambda: out.write_text("a user's file\n"))
    assert_fails(adapter(work, out, "--overwrite"), 2, "is not an .onnx_adapter file")
    assert out.read_text() == "a user's file\n" and leftovers(tmp_path) == []


def test_staging_names_leave_users_files_and_live_runs_alone(work, tmp_path):
    """The old fixed `NAME.partial` was written over and deleted; now only `.NAME.partial-PID-HEX`
    of a process that is gone is removed (with a note), and a live run's is kept."""
    out = tmp_path / "mine.onnx_adapter"
    user = tmp_path / "mine.onnx_adapter.partial"
    user.write_text("mine\n")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f".mine.onnx_adapter.partial-{dead.stdout.strip()}-0badf00d"
    live = tmp_path / f".mine.onnx_adapter.partial-{os.getpid()}-0badf00d"  # this process: alive
    gone.write_bytes(b"half")
    live.write_bytes(b"half")
    result = adapter(work, out)
    assert result.exit_code == 0, result.output
    assert f"removed {gone}" in result.output.replace("\n", "")
    assert not gone.exists() and live.read_bytes() == b"half" and user.read_text() == "mine\n"
    assert adapter_file.foreign(out) is None
