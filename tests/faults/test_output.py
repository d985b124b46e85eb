"""-o in the way: an unwritable parent, a file, the model folder itself or a folder inside it.

Every case fails before any work (exit 2, one line), creates nothing and leaves what was there
(the model, the file, the input package) byte for byte as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from common import assert_clean, assert_fails, invoke, leftovers, tree


def writable_anyway(folder: Path) -> bool:
    """True where permissions are not enforced (root): chmod then cannot make a folder read-only."""
    return os.access(folder, os.W_OK)


@pytest.fixture
def locked(tmp_path):
    """A folder chmod 0o555 (read and enter, no write); restored for the cleanup."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


@pytest.mark.parametrize("where", ["parent", "grandparent"], ids=["-o locked/pkg", "-o locked/new/pkg"])
def test_unwritable_parent(tiny, locked, where):
    if writable_anyway(locked):
        pytest.skip("running as root: chmod 0o555 does not stop root from writing (see test_immutable_parent)")
    out = locked / "pkg" if where == "parent" else locked / "new" / "pkg"
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    assert_fails(result, 2, "cannot write into")
    assert sorted(os.listdir(locked)) == []


@pytest.fixture
def immutable(tmp_path):
    """A folder even root cannot write into (chattr +i); skipped where chattr is not allowed."""
    folder = tmp_path / "immutable"
    folder.mkdir()
    if shutil.which("chattr") is None:
        pytest.skip("no chattr here")
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not allowed here: {made.stderr.strip()}")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_immutable_parent(tiny, immutable):
    """Real permission denial that root meets too: refused up front (exit 2) or as an IO error (exit 1)."""
    out = immutable / "pkg"
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    if result.exit_code == 2:
        assert_fails(result, 2, "cannot write into")
    else:
        assert_fails(result, 1, "permission denied")
    assert sorted(os.listdir(immutable)) == []


def test_unwritable_parent_as_os_access_reports_it(tiny, tmp_path, monkeypatch):
    """The pre-flight check itself, as a non-root user meets it (os.access says no)."""
    import gqa_export.package.staging

    parent = tmp_path / "ro"
    parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        gqa_export.package.staging.os,
        "access",
        lambda path, mode, **kw: False if Path(path) == parent else real_access(path, mode, **kw),
    )
    result = invoke("build", tiny, "-o", parent / "pkg", "--no-smoke")
    assert_fails(result, 2, f"cannot write into {parent}")
    assert_clean(tmp_path, parent / "pkg")


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "--overwrite"])
def test_output_is_a_file(tiny, tmp_path, overwrite):
    out = tmp_path / "pkg"
    out.write_text("not a folder")
    result = invoke("build", tiny, "-o", out, "--no-smoke", *(["--overwrite"] if overwrite else []))
    assert_fails(result, 2, "is a file")
    assert out.read_text() == "not a folder" and leftovers(tmp_path) == []


def test_output_parent_is_a_file(tiny, tmp_path):
    (tmp_path / "plain").write_text("x")
    result = invoke("build", tiny, "-o", tmp_path / "plain" / "pkg", "--no-smoke")
    assert_fails(result, 2, "is a file")
    assert (tmp_path / "plain").read_text() == "x" and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("where", "flags"),
    [
        ("inside", []),
        ("inside", ["--overwrite"]),
        ("nested", []),
        ("same", ["--overwrite"]),
        ("symlink-to-model", ["--overwrite"]),
    ],
    ids=["-o MODEL/pkg", "-o MODEL/pkg --overwrite", "-o MODEL/a/b", "-o MODEL --overwrite", "-o LINK->MODEL"],
)
def test_output_inside_the_model_folder(model, tmp_path, where, flags):
    before = tree(model)
    out = {
        "inside": model / "pkg",
        "nested": model / "a" / "b",
        "same": model,
        "symlink-to-model": tmp_path / "link",
    }[where]
    if where == "symlink-to-model":
        out.symlink_to(model, target_is_directory=True)
    result = invoke("build", model, "-o", out, "--no-smoke", *flags)
    assert_fails(
        result, 2, "is the model folder" if where in ("same", "symlink-to-model") else "inside the model folder"
    )
    assert tree(model) == before, "the model folder changed"
    assert leftovers(tmp_path) == []


def test_output_is_the_model_folder_without_overwrite(model, tmp_path):
    before = tree(model)
    result = invoke("build", model, "-o", model, "--no-smoke")
    assert_fails(result, 2, "is the model folder")
    assert tree(model) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("where", "flags"), [("inside", []), ("same", ["--overwrite"])], ids=["-o PKG/int4", "-o PKG --overwrite"]
)
def test_quantize_output_inside_its_input_package(package, tmp_path, where, flags):
    """`quantize PKG -o ...`: the input package is the model folder of this command."""
    before = tree(package)
    out = package / "int4" if where == "inside" else package
    result = invoke("quantize", package, "-o", out, "-p", "int4", "--no-smoke", *flags)
    assert_fails(result, 2, "inside the input package" if where == "inside" else "is the input package")
    assert tree(package) == before, "the input package changed"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("where", "flags"), [("inside", []), ("same", ["--overwrite"])], ids=["-o SRC/release", "-o SRC --overwrite"]
)
def test_release_output_inside_its_source_folder(model, tmp_path, where, flags):
    spec = tmp_path / "release.yaml"
    spec.write_text(
        f"source: {model}\nlicense: apache-2.0\nsmoke: false\nvariants:\n  - {{ep: cpu, precision: fp32}}\n"
    )
    before = tree(model)
    out = model / "release" if where == "inside" else model
    result = invoke("release", spec, "-o", out, *flags)
    assert_fails(result, 2, "inside the model folder" if where == "inside" else "is the model folder")
    assert tree(model) == before, "the source model folder changed"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["out[/]put", "[bold]pkg"], ids=["closing-markup-tag", "opening-markup-tag"])
def test_message_with_brackets_in_the_path(tiny, tmp_path, name):
    """A path is printed as given: square brackets in it are text, not console markup."""
    out = tmp_path / name  # "out[/]put": a folder "out[" holding the file "]put"
    out.parent.mkdir(exist_ok=True)
    out.write_text("a file")
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    assert_fails(result, 2, f"output path {out} is a file")
    assert out.read_text() == "a file" and stat.S_ISREG(out.stat().st_mode)
