"""Disk full (and its cousins: quota, permissions, read-only file system, IO errors) while a
package is written, injected in-process where the writing code looks the function up.

Each case: exit 1, one line saying what failed, nothing at -o (or the package already there with
--overwrite byte for byte as it was) and no staging or backup folder left next to -o.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from common import assert_clean, assert_fails, invoke, tree

MESSAGES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "no space left on the device",
    errno.EACCES: "permission denied",
    errno.EROFS: "permission denied",
    errno.EIO: os.strerror(errno.EIO),
}


def fault(code: int, path: object) -> OSError:
    return OSError(code, os.strerror(code), str(path))


class FailingFile:
    """A file whose second write fails: the disk fills up halfway through the weights."""

    def __init__(self, f, code: int, path: Path) -> None:
        self._f, self._code, self._path, self._writes = f, code, path, 0

    def write(self, data):
        self._writes += 1
        if self._writes > 1:
            raise fault(self._code, self._path)
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def in_staging(path: object) -> bool:
    return ".partial-" in str(path)


def break_weights(monkeypatch, code):
    real_open = Path.open

    def open_(self, mode="r", *args, **kwargs):
        f = real_open(self, mode, *args, **kwargs)
        return FailingFile(f, code, self) if self.name.endswith(".data") and "w" in mode else f

    monkeypatch.setattr(Path, "open", open_)


def break_graph(monkeypatch, code):
    import onnx_ir

    def save(model, path, *args, **kwargs):
        raise fault(code, path)

    monkeypatch.setattr(onnx_ir, "save", save)


def break_json(module: str, name: str):
    def inject(monkeypatch, code):
        import importlib

        mod = importlib.import_module(module)
        real = mod.write_json

        def write_json(path, data):
            if Path(path).name == name:
                raise fault(code, path)
            return real(path, data)

        monkeypatch.setattr(mod, "write_json", write_json)

    return inject


def break_tokenizer(monkeypatch, code):
    """The copy of an input file (the tokenizer) into the staging folder fails where the kernel
    would: in os.sendfile, inside shutil.copy2, which then names the source file in `filename` and
    the copy in `filename2` (a message that named `filename` blamed the input)."""
    real = os.sendfile

    def sendfile(out_fd, in_fd, offset, count):
        if in_staging(os.readlink(f"/proc/self/fd/{out_fd}")):
            raise OSError(code, os.strerror(code))
        return real(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)


def break_staging(monkeypatch, code):
    real = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if in_staging(self.name):
            raise fault(code, self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)


def break_commit(monkeypatch, code):
    """The rename of the finished staging folder onto -o fails (after -o was moved aside): ext4
    answers ENOSPC when the parent folder's directory entries need a new block on a full disk."""
    real = Path.rename

    def rename(self, target):
        if in_staging(self.name):  # as os.rename raises it: the source, then the target
            raise OSError(code, os.strerror(code), str(self), None, str(target))
        return real(self, target)

    monkeypatch.setattr(Path, "rename", rename)


POINTS = {
    "weights": break_weights,
    "graph": break_graph,
    "genai_config": break_json("gqa_export.stages.package", "genai_config.json"),
    "manifest": break_json("gqa_export.package.manifest", "manifest.json"),
    "tokenizer": break_tokenizer,
    "staging-mkdir": break_staging,
    "commit-rename": break_commit,
}
E = errno.errorcode
# (command, where it fails, errno, --overwrite over an existing package)
CASES = [
    *[("build", "weights", code, False) for code in MESSAGES],
    *[("build", point, errno.ENOSPC, False) for point in ("graph", "genai_config", "manifest", "tokenizer")],
    ("build", "staging-mkdir", errno.EACCES, False),
    ("build", "staging-mkdir", errno.EROFS, False),
    ("build", "commit-rename", errno.ENOSPC, False),
    ("build", "weights", errno.ENOSPC, True),
    ("build", "manifest", errno.ENOSPC, True),
    ("build", "commit-rename", errno.ENOSPC, True),
    ("quantize", "weights", errno.ENOSPC, False),
    ("quantize", "weights", errno.ENOSPC, True),
    ("quantize", "manifest", errno.EDQUOT, False),
    ("release", "weights", errno.ENOSPC, False),
    ("release", "manifest", errno.ENOSPC, True),
]


def command_args(command: str, tiny: Path, built: Path, tmp_path: Path, out: Path) -> list[object]:
    if command == "build":
        return ["build", tiny, "-o", out, "--no-smoke"]
    if command == "quantize":
        source = Path(shutil.copytree(built, tmp_path / "float"))
        return ["quantize", source, "-o", out, "-p", "int4", "--no-smoke"]
    spec = tmp_path / "release.yaml"
    spec.write_text(f"source: {tiny}\nlicense: apache-2.0\nsmoke: false\nvariants:\n  - {{ep: cpu, precision: fp32}}\n")
    return ["release", spec, "-o", out]


@pytest.mark.parametrize(
    ("command", "point", "code", "overwrite"),
    CASES,
    ids=[f"{c}-{p}-{E[e]}" + ("-overwrite" if o else "") for c, p, e, o in CASES],
)
def test_write_fails(tiny, built, tmp_path, monkeypatch, command, point, code, overwrite):
    out = tmp_path / "out"
    args = command_args(command, tiny, built, tmp_path, out)
    before = None
    if overwrite:
        shutil.copytree(built, out)
        before = tree(out)
        args.append("--overwrite")
    POINTS[point](monkeypatch, code)
    result = invoke(*args)
    monkeypatch.undo()  # the checks below read files with the real functions
    assert_fails(result, 1, MESSAGES[code])
    assert_clean(tmp_path, out, before)


@pytest.mark.parametrize("point", ["weights", "tokenizer", "commit-rename"])
def test_disk_full_names_the_output(tiny, tmp_path, monkeypatch, point):
    """A full disk is the output's problem: the line names the file being written as it would be
    at -o (not the input file a copy read, nor the hidden staging folder) and says to free space."""
    out = tmp_path / "out"
    POINTS[point](monkeypatch, errno.ENOSPC)
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    monkeypatch.undo()
    line = assert_fails(result, 1, "no space left on the device writing ")
    written = {"weights": "model.onnx.data", "tokenizer": "tokenizer", "commit-rename": ""}[point]
    assert f"writing {out.resolve() / written}" in line, line
    assert str(tiny) not in line and ".partial-" not in line, line
    assert "free space on that disk or choose another -o" in line
    assert_clean(tmp_path, out)


def test_staging_paths_are_named_as_final():
    """final_path reads the name StagedPackage gives its folder (a renamed scheme breaks this)."""
    from gqa_export.errors import final_path
    from gqa_export.package.staging import StagedPackage

    staged = StagedPackage(Path("/data/my.pkg"), overwrite=False)
    assert final_path(str(staged.path / "sub" / "model.onnx.data")) == "/data/my.pkg/sub/model.onnx.data"
    assert final_path("/data/.my.pkg.old-1-abcdef12/x") == "/data/.my.pkg.old-1-abcdef12/x"  # only staging


@pytest.mark.parametrize("free", [4096, 0])
def test_free_space_message_in_the_unit_that_fits(tiny, tmp_path, monkeypatch, free):
    """A tiny package's sizes are not "0.00 GiB": each in the unit that fits, and the shortfall
    (never 0, where the two round alike)."""
    import gqa_export.package.staging
    import gqa_export.stages.package
    from gqa_export.units import size

    total, asked = 10 << 30, []
    real = gqa_export.stages.package.check_free_space

    def check(out, needed):
        asked.append(needed)
        return real(out, needed)

    monkeypatch.setattr(gqa_export.stages.package, "check_free_space", check)
    usage = shutil._ntuple_diskusage(total, total - free, free)
    monkeypatch.setattr(gqa_export.package.staging.shutil, "disk_usage", lambda path: usage)
    out = tmp_path / "out"
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    monkeypatch.undo()
    [needed] = asked
    assert 1024 <= needed < 1 << 30, needed  # a tiny package: KiB or MiB, where GiB printed 0.00
    says = f"needs at least {size(needed)} and {size(free)} are free ({size(needed - free)} short)"
    line = assert_fails(result, 1, says)
    assert "GiB" not in line and "0.00" not in line, line
    assert_clean(tmp_path, out)


@pytest.mark.parametrize("overwrite", [False, True], ids=["fresh", "--overwrite"])
def test_free_space_preflight(tiny, built, tmp_path, monkeypatch, overwrite):
    """Too little free space is found before anything is written."""
    import gqa_export.package.staging

    out = tmp_path / "out"
    before = None
    if overwrite:
        shutil.copytree(built, out)
        before = tree(out)
    calls = []

    def disk_usage(path):
        calls.append(path)
        return shutil._ntuple_diskusage(10 << 30, (10 << 30) - 4096, 4096)

    monkeypatch.setattr(gqa_export.package.staging.shutil, "disk_usage", disk_usage)
    staged = []
    real_mkdir = Path.mkdir
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: (staged.append(self), real_mkdir(self, *a, **k))[1])
    result = invoke("build", tiny, "-o", out, "--no-smoke", *(["--overwrite"] if overwrite else []))
    monkeypatch.undo()
    assert_fails(result, 1, "not enough free space")
    assert calls, "shutil.disk_usage was never asked"
    assert not [p for p in staged if ".partial-" in p.name], "a staging folder was made before the check"
    assert_clean(tmp_path, out, before)


def test_out_of_memory_while_streaming_weights(tiny, tmp_path, monkeypatch):
    import gqa_export.package.writer

    def blocks(tensor):
        raise MemoryError
        yield  # pragma: no cover

    monkeypatch.setattr(gqa_export.package.writer, "_blocks", blocks)
    out = tmp_path / "out"
    result = invoke("build", tiny, "-o", out, "--no-smoke")
    monkeypatch.undo()
    assert_fails(result, 1, "ran out of memory")
    assert_clean(tmp_path, out)
