"""Cached virtualenvs layered on the running interpreter's packages (the transformers floor run,
the OpenVINO run): the venv's own site-packages hold what differs, and a `.pth` file names the
parent's site-packages, so everything else comes from the parent. That works from inside a
virtualenv too, where `system_site_packages` would reach the base interpreter instead.

A layered venv belongs to one parent interpreter, so it is cached per parent (`sys.prefix`). A
parent that is gone (each `.ci/run` makes a fresh virtualenv and removes it) leaves its layered
venvs behind; `layered_venv` removes those of the same kind whose `.pth` names no folder that
still exists, so the cache holds one copy per living parent instead of one per run. Only the
venvs this host made are judged (a `host` file in each): a cache shared between machines through
GQA_EXPORT_TEST_CACHE never loses another machine's venvs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

PTH = "gqa_export_parent.pth"
HOST = "host"  # the machine that made the venv (its parent's folders are only seen from there)


def cache_dir() -> Path:
    return Path(os.environ.get("GQA_EXPORT_TEST_CACHE", Path.home() / ".cache" / "gqa-export-tests"))


def layered_venv(kind: str) -> Path:
    """The folder of this parent's layered venv of `kind` (e.g. "transformers-4.57.6"), after
    removing the same kind's venvs whose parent is gone. Not created: see `create_layered`."""
    key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:10]
    env_dir = cache_dir() / f"{kind}-{key}"
    for other in cache_dir().glob(f"{kind}-*"):
        if other != env_dir and other.is_dir() and _parent_gone(other):
            shutil.rmtree(other, ignore_errors=True)
    return env_dir


def create_layered(env_dir: Path) -> Path:
    """A fresh venv at env_dir (whatever was there removed) whose `.pth` names the parent's
    site-packages; its python."""
    shutil.rmtree(env_dir, ignore_errors=True)  # missing, half-made or broken: start again
    venv.create(env_dir, with_pip=True)
    (env_dir / HOST).write_text(socket.gethostname())
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    parents = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / PTH).write_text("".join(f"{p}\n" for p in parents))
    return python


def _parent_gone(env_dir: Path) -> bool:
    """True when this host made the venv (no `host` file: made before it was written, on the only
    machine that used the cache) and its `.pth` names parent folders none of which exists any more."""
    made_by = env_dir / HOST
    if made_by.is_file() and made_by.read_text().strip() != socket.gethostname():
        return False
    for pth in env_dir.glob(f"lib/python*/site-packages/{PTH}"):
        named = [line.strip() for line in pth.read_text().splitlines() if line.strip()]
        return bool(named) and not any(Path(p).is_dir() for p in named)
    return False
