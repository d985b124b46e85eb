"""`--overwrite` never deletes what gqa-export did not write.

It replaces only an empty folder, a package this tool wrote (its manifest lists every file) or a
release it wrote (release.json likewise). It refuses, with exit 2, one line and nothing touched:
an `-o` that is or contains the current directory, the source, the input package or the release
spec's folder, an `-o` inside the source or input package, and any other non-empty folder. Every
other input stays out of -o too, even where -o is gqa-export's own and so replaceable: the recipe
and KV calibration files, the draft, a release's eval text, drafts and PEFT folders. (`adapter`'s
single-file -o: test_adapter_outputs.py.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from common import assert_fails, invoke, leftovers, tree

from gqa_export.errors import InputError
from gqa_export.package.staging import StagedPackage


def user_folder(folder: Path) -> Path:
    """A folder holding a user's work: notes, a repository, a model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.md").write_text("my notes\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return folder


def spec_for(folder: Path, source: Path | str) -> Path:
    spec = folder / "release.yaml"
    spec.write_text(
        f"source: {source}\nlicense: apache-2.0\nsmoke: false\nvariants:\n  - {{ep: cpu, precision: fp32}}\n"
    )
    return spec


def test_build_into_the_current_directory_that_holds_the_model(tiny, tmp_path, monkeypatch):
    """The reported case: `cd project && gqa-export build ./model -o . --overwrite`."""
    project = user_folder(tmp_path / "project")
    shutil.copytree(tiny, project / "model")
    before = tree(project)
    monkeypatch.chdir(project)
    result = invoke("build", "./model", "-o", ".", "--overwrite", "--no-smoke")
    assert_fails(result, 2, "is the current directory")
    assert tree(project) == before and leftovers(tmp_path) == []


def test_build_into_a_parent_of_the_current_directory(tiny, tmp_path, monkeypatch):
    work = user_folder(tmp_path / "work")
    (work / "sub").mkdir()
    before = tree(work)
    monkeypatch.chdir(work / "sub")
    result = invoke("build", tiny, "-o", "..", "--overwrite", "--no-smoke")
    assert_fails(result, 2, "contains the current directory")
    assert tree(work) == before and leftovers(tmp_path) == []


def test_build_into_a_folder_that_holds_the_model(model, tmp_path):
    (tmp_path / "notes.md").write_text("x")
    before = tree(tmp_path)
    result = invoke("build", model, "-o", tmp_path, "--overwrite", "--no-smoke")
    assert_fails(result, 2, "contains the model folder")
    assert tree(tmp_path) == before


def test_build_over_a_documents_folder(tiny, tmp_path):
    docs = user_folder(tmp_path / "docs")
    before = tree(docs)
    result = invoke("build", tiny, "-o", docs, "--overwrite", "--no-smoke")
    line = assert_fails(result, 2, "replaces only an empty folder or a package or release gqa-export wrote")
    assert ".git" in line and "notes.md" in line
    assert tree(docs) == before and leftovers(tmp_path) == []


def test_build_over_an_unrelated_manifest(tiny, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"tool": {"name": "someone-else"}, "files": {}}))
    before = tree(other)
    result = invoke("build", tiny, "-o", other, "--overwrite", "--no-smoke")
    assert_fails(result, 2, "holds a manifest.json that gqa-export did not write")
    assert tree(other) == before


def test_build_over_its_own_package_with_a_user_file_added(package, tiny, tmp_path):
    (package / "notes.md").write_text("my findings\n")
    before = tree(package)
    result = invoke("build", tiny, "-o", package, "--overwrite", "--no-smoke")
    assert_fails(result, 2, "holds files its manifest.json does not list (notes.md)")
    assert tree(package) == before and leftovers(tmp_path) == []


def test_build_replaces_its_own_package_and_an_empty_folder(package, tiny, tmp_path):
    result = invoke("build", tiny, "-o", package, "--overwrite", "--no-smoke", "-q")
    assert result.exit_code == 0, result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("build", tiny, "-o", empty, "--overwrite", "--no-smoke", "-q")
    assert result.exit_code == 0, result.output
    assert (empty / "model.onnx").is_file() and leftovers(tmp_path) == []


def test_quantize_over_a_foreign_folder(package, tmp_path):
    docs = user_folder(tmp_path / "docs")
    before = tree(docs)
    result = invoke("quantize", package, "-o", docs, "-p", "int4", "--overwrite", "--no-smoke")
    assert_fails(result, 2, "replaces only an empty folder")
    assert tree(docs) == before and leftovers(tmp_path) == []


def test_quantize_into_a_folder_that_holds_the_input_package(package, tmp_path):
    before = tree(tmp_path)
    result = invoke("quantize", package, "-o", tmp_path, "-p", "int4", "--overwrite", "--no-smoke")
    assert_fails(result, 2, "contains the input package")
    assert tree(tmp_path) == before


def test_release_into_the_current_directory_with_spec_and_source(model, tmp_path, monkeypatch):
    """The reported case: spec and source in `.`, `release spec.yaml -o . --overwrite`."""
    spec = spec_for(tmp_path, model.name)
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = invoke("release", spec.name, "-o", ".", "--overwrite")
    assert_fails(result, 2, "is the current directory")
    assert tree(tmp_path) == before


def test_release_into_the_spec_folder(model, tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    spec = spec_for(folder, model)
    before = tree(folder)
    result = invoke("release", spec, "-o", folder, "--overwrite")
    assert_fails(result, 2, "is the release spec's folder")
    assert tree(folder) == before


def test_release_over_a_foreign_folder_and_over_its_own(model, tmp_path):
    spec = spec_for(tmp_path, model)
    out = user_folder(tmp_path / "out")
    before = tree(out)
    result = invoke("release", spec, "-o", out, "--overwrite")
    assert_fails(result, 2, "replaces only an empty folder")
    assert tree(out) == before
    shutil.rmtree(out)
    assert invoke("release", spec, "-o", out).exit_code == 0
    result = invoke("release", spec, "-o", out, "--overwrite")
    assert result.exit_code == 0, result.output  # its own release: every file listed in release.json
    (out / "cpu_and_mobile" / "notes.md").write_text("x")
    before = tree(out)
    result = invoke("release", spec, "-o", out, "--overwrite")
    assert_fails(result, 2, "holds files its release.json does not list (cpu_and_mobile/notes.md)")
    assert tree(out) == before and leftovers(tmp_path) == []


def test_a_foreign_folder_that_appears_during_the_build_is_kept(tmp_path):
    """The pre-flight check ran on an empty -o; a user's file lands there before the commit."""
    out = tmp_path / "pkg"
    with StagedPackage(out, overwrite=True) as staged:
        (staged.path / "model.onnx").write_text("new")
        user_folder(out)
        before = tree(out)
        with pytest.raises(InputError, match="replaces only an empty folder"):
            staged.commit()
    assert tree(out) == before and leftovers(tmp_path) == []


def owned(folder: Path, kind: str = "release.json") -> Path:
    """`folder` as gqa-export's own package or release (every file listed): replaceable by itself,
    so only the input check stands between --overwrite and the inputs it holds."""
    files = {p.relative_to(folder).as_posix(): {} for p in folder.rglob("*") if p.is_file()}
    body = {"tool": {"name": "gqa-export"}, "files": files, **({"variants": []} if kind == "release.json" else {})}
    (folder / kind).write_text(json.dumps(body))
    return folder


def input_inside(out: Path, what: str, tiny: Path) -> Path:
    """An input of kind `what` placed inside `out`."""
    if what in ("text", "recipe"):
        out.mkdir(parents=True, exist_ok=True)
        (out / "README.md").write_text("the text a user keeps here\n")
        return out / "README.md"
    if what == "peft":
        (out / "peft").mkdir(parents=True)
        (out / "peft" / "adapter_config.json").write_text("{}")
        return out / "peft"
    return Path(shutil.copytree(tiny, out / what))  # a model folder: the source or a draft


@pytest.mark.parametrize(
    ("flag", "what", "words"),
    [
        ("--kv-calibration", "text", "contains the KV text file"),
        ("--recipe", "recipe", "contains the recipe"),
        ("--draft", "draft", "contains the draft model folder"),
    ],
)
def test_build_over_its_own_package_holding_an_input(tiny, tmp_path, flag, what, words):
    """An input the old package records (or holds) is read by the build and would go with the
    package it replaces."""
    out = tmp_path / "pkg"
    source = input_inside(out, what, tiny)
    owned(out, "manifest.json")
    before = tree(tmp_path)
    extra = ["--kv-cache", "int8"] if flag == "--kv-calibration" else []
    result = invoke("build", tiny, "-o", out, flag, source, *extra, "--overwrite", "--no-smoke")
    assert_fails(result, 2, words)
    assert tree(tmp_path) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("inside", [False, True], ids=["-o DRAFT", "-o DRAFT/pkg"])
def test_build_into_the_draft_model_folder(tiny, model, tmp_path, inside):
    """Refused before anything is built, naming -o (not a staging folder inside the draft)."""
    out = model / "pkg" if inside else model
    before = tree(tmp_path)
    result = invoke("build", tiny, "-o", out, "--draft", model, "--overwrite", "--no-smoke")
    assert_fails(result, 2, f"{'is inside' if inside else 'is'} the draft model folder")
    assert tree(tmp_path) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("what", "words"),
    [
        ("source", "contains the model folder"),
        ("text", "contains the eval text"),
        ("peft", "contains the PEFT adapter folder"),
        ("draft", "contains the draft model folder"),
    ],
)
def test_release_over_its_own_release_holding_an_input(tiny, tmp_path, what, words):
    out = tmp_path / "out"
    source = input_inside(out, what, tiny)
    owned(out)
    variant = {"ep": "cpu", "precision": "fp32"}
    spec = {"source": str(source if what == "source" else tiny), "license": "apache-2.0", "smoke": False}
    if what == "text":
        spec["eval"] = {"text": str(source)}
    if what == "peft":
        variant.update(lora_targets=["q_proj"], adapters=[str(source)])
    if what == "draft":
        variant["draft"] = str(source)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "release.yaml").write_text(json.dumps({**spec, "variants": [variant]}))
    before = tree(tmp_path)
    result = invoke("release", tmp_path / "specs" / "release.yaml", "-o", out, "--overwrite")
    assert_fails(result, 2, words)
    assert tree(tmp_path) == before and leftovers(tmp_path) == []


def test_quantize_over_the_release_that_holds_the_input_package(package, tmp_path):
    out = tmp_path / "rel"
    out.mkdir()
    inner = Path(shutil.move(package, out / "cpu"))
    owned(out)
    before = tree(tmp_path)
    result = invoke("quantize", inner, "-o", out, "-p", "int4", "--overwrite", "--no-smoke")
    assert_fails(result, 2, "contains the input package")
    assert tree(tmp_path) == before
