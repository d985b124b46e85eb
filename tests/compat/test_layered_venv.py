"""The layered-venv cache removes only what this host made for a parent that is gone
(tests/compat/layered_venv.py): never another machine's venvs, never a folder without our `.pth`."""

from __future__ import annotations

import socket
from pathlib import Path

from layered_venv import HOST, PTH, layered_venv


def _fake_venv(root: Path, name: str, parent: str | None, host: str | None) -> Path:
    folder = root / name
    site = folder / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if parent is not None:
        (site / PTH).write_text(f"{parent}\n")
    if host is not None:
        (folder / HOST).write_text(host)
    return folder


def test_only_this_hosts_venvs_of_gone_parents_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("GQA_EXPORT_TEST_CACHE", str(tmp_path))
    here, gone = socket.gethostname(), str(tmp_path / "removed-parent")
    stale = _fake_venv(tmp_path, "kind-1-aaa", gone, here)
    legacy = _fake_venv(tmp_path, "kind-1-bbb", gone, None)
    other_host = _fake_venv(tmp_path, "kind-1-ccc", gone, "another-machine")
    alive = _fake_venv(tmp_path, "kind-1-ddd", str(tmp_path), here)
    no_pth = _fake_venv(tmp_path, "kind-1-eee", None, here)
    other_kind = _fake_venv(tmp_path, "other-1-fff", gone, here)
    layered_venv("kind-1")
    assert not stale.exists() and not legacy.exists()
    assert other_host.exists() and alive.exists() and no_pth.exists() and other_kind.exists()
