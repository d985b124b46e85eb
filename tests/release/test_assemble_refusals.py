"""What `release --variant` and `release assemble` refuse: one line naming the part, file or
variant, exit 2 (a gate missed across parts: exit 1), nothing written at -o, nothing left beside it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from parts_harness import EVAL_TEXT, FOLDERS, TRAINED, invoke, write_spec

from gqa_export.package.manifest import write_sealed


def refused(result, message: str, out: Path, code: int = 2) -> str:
    """One `error:` line saying `message`, the exit code, no traceback, nothing at `out` or beside it."""
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == code and len(errors) == 1, result.output
    assert "Traceback" not in result.output and message in errors[0], errors[0]
    assert not out.exists(), f"{out} was written"
    assert [p.name for p in out.parent.iterdir() if re.search(r"\.(partial|old|trash|swap)-", p.name)] == []
    return errors[0]


@pytest.fixture
def parts(matrix_run, tmp_path) -> list[Path]:
    """Copies of the four parts the workflow made, in the spec's order."""
    copies = []
    for folder in FOLDERS:
        name = "part-" + folder.replace("/", "__")
        shutil.copytree(matrix_run["parts"] / name, tmp_path / name)
        copies.append(tmp_path / name)
    return copies


def resealed(part: Path, change) -> None:
    record = json.loads((part / "part.json").read_text())
    change(record)
    write_sealed(part / "part.json", record)


def test_unknown_and_repeated_variants(spec, tmp_path):
    out = tmp_path / "part"
    line = refused(invoke("release", spec, "--variant", "cuda/cuda-bf16", "-o", out), "no such variant", out)
    assert all(folder in line for folder in FOLDERS)  # the spec's variants, listed
    twice = ("--variant", FOLDERS[2], "--variant", "part-" + FOLDERS[2].replace("/", "__"))
    refused(invoke("release", spec, *twice, "-o", out), "is given twice", out)
    refused(invoke("release", spec, "--variant", FOLDERS[0]), "release needs -o DIR", out)


def test_a_missing_variant(spec, parts, tmp_path):
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts[:2], parts[3], "-o", out), "no part holds", out)
    assert FOLDERS[2] in line and f"--variant {FOLDERS[2]}" in line


def test_a_variant_in_two_parts(spec, parts, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(parts[1], twin)
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, twin, "-o", out), f"variant {FOLDERS[1]} is in two", out)
    assert str(twin) in line


def test_an_extra_file(spec, parts, tmp_path):
    (parts[2] / FOLDERS[2] / "notes.txt").write_text("mine")
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), "not listed (an extra file)", out)
    assert f"{parts[2]}: {FOLDERS[2]}/notes.txt" in line
    assert (parts[2] / FOLDERS[2] / "notes.txt").read_text() == "mine"  # never touched


def test_an_edited_and_a_missing_file(spec, parts, tmp_path):
    data = parts[3] / FOLDERS[3] / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), "changed", out)
    assert f"{parts[3]}: {FOLDERS[3]}/model.onnx.data: changed" in line
    (parts[0] / FOLDERS[0] / "genai_config.json").unlink()
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), "missing", out)
    assert f"{parts[0]}: {FOLDERS[0]}/genai_config.json: missing" in line


def test_an_edited_part_record(spec, parts, tmp_path):
    record = parts[1] / "part.json"
    record.write_text(record.read_text().replace('"max_length": ', '"max_length": 1'))
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), "does not match its digest", out)
    assert str(parts[1]) in line
    (tmp_path / "empty").mkdir()
    intact = [parts[0], *parts[2:], tmp_path / "empty"]
    line = refused(invoke("release", "assemble", spec, *intact, "-o", out), "holds no part.json", out)
    assert str(tmp_path / "empty") in line


def test_another_spec(spec, parts, tmp_path):
    other = tmp_path / "other" / "release.yaml"
    other.parent.mkdir()
    other.write_text(spec.read_text() + "tags: [mine]\n")
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", other, *parts, "-o", out), "made from another spec", out)
    assert str(parts[0]) in line


def test_another_gqa_export_version(spec, parts, tmp_path, monkeypatch):
    from gqa_export.package import manifest

    monkeypatch.setattr(manifest, "__version__", "99.0")
    out = tmp_path / "release"
    refused(invoke("release", "assemble", spec, *parts, "-o", out), "this is 99.0: make every part with one", out)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["source"].update(revision="f" * 40), "read another source"),
        (lambda r: r["pin"].update(content_sha256="0" * 64), "read other source files"),
        (lambda r: r["eval"].update(window=64), "was evaluated on another text or window"),
        (lambda r: r.update(python="3.0.0"), "was made with other versions"),
        (lambda r: r["dependencies"].update(onnx="0.1"), "dependencies.onnx: '0.1' vs"),
    ],
    ids=["source", "pin", "eval", "python", "dependency"],
)
def test_parts_that_disagree(spec, parts, tmp_path, change, message):
    resealed(parts[2], change)
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), message, out)
    assert f"part {parts[2]}" in line and str(parts[0]) in line


def test_a_variant_the_spec_does_not_list(spec, parts, tmp_path):
    resealed(parts[3], lambda r: r["variants"][0].update(path="cuda/cuda-int4-rtn-block-64"))
    out = tmp_path / "release"
    line = refused(invoke("release", "assemble", spec, *parts, "-o", out), "which release.yaml does not list", out)
    assert f"part {parts[3]} holds variant cuda/cuda-int4-rtn-block-64" in line


def test_output_inside_a_part(spec, parts):
    out = parts[0] / "release"
    refused(invoke("release", "assemble", spec, *parts, "-o", out), "is inside the part", out)


@pytest.fixture(scope="module")
def twin_sources(tmp_path_factory) -> dict[str, Path]:
    """Two spec folders with the same spec bytes (a relative source); the second's checkpoint holds
    one more file. Variants: fp32, and int4 with a gate no quantization meets (checked across parts)."""
    # fp32's max_length 96 sets every part's eval window (no eval.window): the int4 part, which
    # does not hold it, must score over the same window or the parts disagree
    fp32 = {"ep": "cpu", "precision": "fp32", "max_length": 96}
    variants = [fp32, {"ep": "cpu", "precision": "int4", "gate": {"max_ppl_increase": 1e-6}}]
    specs = {}
    for name in ("a", "b"):
        folder = tmp_path_factory.mktemp(name)
        shutil.copytree(TRAINED, folder / "model")
        shutil.copyfile(EVAL_TEXT, folder / "eval.txt")
        specs[name] = write_spec(folder, variants, source="model", eval={"text": "eval.txt"})
    (specs["b"].parent / "model" / "NOTES.md").write_text("a file the other checkpoint lacks\n")
    assert specs["a"].read_bytes() == specs["b"].read_bytes()
    return specs


def test_a_gate_missed_across_parts_fails_the_assembly(twin_sources, tmp_path):
    """Each part passes (its gate's reference is in the other); assembling compares them: exit 1."""
    spec = twin_sources["a"]
    for i, folder in enumerate(("cpu_and_mobile/cpu-fp32", "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4")):
        result = invoke("release", spec, "--variant", folder, "-o", tmp_path / f"p{i}", "-q")
        assert result.exit_code == 0, result.output
    window = [json.loads((tmp_path / p / "part.json").read_text())["eval"]["window"] for p in ("p0", "p1")]
    assert window == [96, 96]  # the int4 part scored over the window fp32's max_length sets
    out = tmp_path / "release"
    line = refused(
        invoke("release", "assemble", spec, tmp_path / "p0", tmp_path / "p1", "-o", out), "exceeds its gate", out, 1
    )
    assert "variant cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4: perplexity +" in line
    # the same spec with the reference in the same part: the part itself fails, nothing written
    both = ("--variant", "cpu_and_mobile/cpu-fp32", "--variant", "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4")
    refused(invoke("release", spec, *both, "-o", tmp_path / "p2", "-q"), "exceeds its gate", tmp_path / "p2", 1)


def test_parts_of_different_checkpoints(twin_sources, tmp_path):
    """Same spec bytes, same folder name, one more file in one checkpoint: its content hash differs."""
    fp32 = ("--variant", "cpu_and_mobile/cpu-fp32")
    for name in ("a", "b"):
        result = invoke("release", twin_sources[name], *fp32, "-o", tmp_path / name, "-q")
        assert result.exit_code == 0, result.output
    out = tmp_path / "release"
    line = refused(
        invoke("release", "assemble", twin_sources["a"], tmp_path / "a", tmp_path / "b", "-o", out),
        "read other source files",
        out,
    )
    assert "pin.content_sha256" in line
