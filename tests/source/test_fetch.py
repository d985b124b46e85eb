"""Hub ids resolve through huggingface_hub's real cache logic, offline (HF_HUB_OFFLINE=1).

The cache folder is laid out by hand exactly as huggingface_hub writes it
(models--ORG--NAME/{refs/main, snapshots/<commit>/...}); the CLI runs in a subprocess because
huggingface_hub reads HF_HUB_OFFLINE and HF_HUB_CACHE when it is imported. The same subprocess
proves the export path never imports torch: torch is made unimportable before anything runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COMMIT = "0123456789abcdef0123456789abcdef01234567"
# Runs the CLI with torch unimportable: any `import torch` on the export path raises ImportError.
NO_TORCH_CLI = (
    "import sys; sys.modules['torch'] = None; from gqa_export.cli import main; sys.argv[0] = 'gqa-export'; main()"
)


@pytest.fixture()
def hub_cache(checkpoints, tmp_path) -> Path:
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(checkpoints.get("gqa"), snapshot)
    (snapshot / "pytorch_model.bin").write_bytes(b"never fetched")  # a stray pickle must be ignored
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


def run_cli(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home")}
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH_CLI, *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_fetch_and_build_from_hf_cache_without_torch(hub_cache, tmp_path):
    fetched = run_cli(hub_cache, "fetch", "acme/tiny-llama", "-q")
    assert fetched.returncode == 0, fetched.stderr
    assert Path(fetched.stdout.strip()) == hub_cache / "models--acme--tiny-llama" / "snapshots" / COMMIT

    out = tmp_path / "pkg"
    built = run_cli(hub_cache, "build", "acme/tiny-llama", "-o", str(out), "--json")
    assert built.returncode == 0, built.stderr
    report = json.loads(built.stdout.strip().splitlines()[-1])
    assert report["source"] == "acme/tiny-llama" and report["revision"] == COMMIT
    assert report["smoke"]["new_tokens"] == 16
    manifest = json.loads((out / "manifest.json").read_text())
    assert {k: manifest["source"][k] for k in ("id", "revision", "local")} == {
        "id": "acme/tiny-llama",
        "revision": COMMIT,
        "local": False,
    }


def test_fetch_with_progress_bars(hub_cache):
    """Not quiet: huggingface_hub gets the rich-drawn tqdm class (nothing to download offline)."""
    fetched = run_cli(hub_cache, "fetch", "acme/tiny-llama")
    assert fetched.returncode == 0, fetched.stderr
    assert "> fetch acme/tiny-llama" in fetched.stderr and fetched.stdout.strip().endswith(COMMIT)


def test_revision_by_commit(hub_cache):
    fetched = run_cli(hub_cache, "fetch", "acme/tiny-llama", "--revision", COMMIT, "-q")
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.strip().endswith(COMMIT)


def test_unknown_hub_id_exits_2(hub_cache, tmp_path):
    result = run_cli(hub_cache, "build", "acme/does-not-exist", "-o", str(tmp_path / "pkg"))
    assert result.returncode == 2
    assert "model 'acme/does-not-exist' is not in the local Hugging Face cache" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "pkg").exists()


def test_repository_not_found_message(monkeypatch):
    """huggingface_hub's own 404 error (raised by the real function's dependency) maps to one line."""
    import httpx2
    import huggingface_hub
    from huggingface_hub import errors

    from gqa_export.errors import InputError
    from gqa_export.source.fetch import resolve_source

    def not_found(*args, **kwargs):
        response = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co/api/models/x/y"))
        raise errors.RepositoryNotFoundError("404 Client Error", response=response)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_found)
    with pytest.raises(InputError, match=r"model 'x/y' was not found on the Hugging Face Hub \(check the id"):
        resolve_source("x/y")
