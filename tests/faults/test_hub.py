"""Hub ids that cannot be had: not found, gated without a token, a revision that does not exist,
offline with an empty cache or a cache without that revision, the network down, a proxy error.

huggingface_hub runs for real against a cache folder laid out by hand (offline, or with every
connection refused: nothing is fetched), or `snapshot_download` raises the error the Hub's answer
would make it raise. `fetch` and `build` each: one line naming the repository (and the revision
where that is what is missing), exit 2 (exit 1 accepted where the network itself failed), nothing
at -o. Where the network or the Hub fails (unreachable, 5xx, 429, a timeout, a proxy) the exit
code is 1, a failed run outside the input; what the user can fix (an id, a revision, a token, a
4xx answer, HF_HUB_OFFLINE with nothing cached) is 2.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from common import assert_clean, assert_fails, invoke
from huggingface_hub import constants, errors

REPO = "acme/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty HF cache, offline; tests lay out what they need in it."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def lay_out(cache: Path, tiny: Path, files: tuple[str, ...] | None = None) -> Path:
    """models--acme--tiny-llama/{refs/main, snapshots/COMMIT/...} as huggingface_hub writes it."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for item in tiny.iterdir():
        if files is None or item.name in files:
            shutil.copy2(item, snapshot / item.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def args(command: str, tmp_path: Path, *extra: str) -> list[object]:
    if command == "fetch":
        return ["fetch", REPO, *extra]
    return ["build", REPO, "-o", tmp_path / "pkg", "--no-smoke", *extra]


COMMANDS = ["fetch", "build"]


@pytest.mark.parametrize("command", COMMANDS)
def test_offline_empty_cache(hub, tmp_path, command):
    result = invoke(*args(command, tmp_path))
    assert_fails(result, 2, f"model '{REPO}' is not in the local Hugging Face cache")
    assert_clean(tmp_path, tmp_path / "pkg")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("revision", ["v9", OTHER_COMMIT], ids=["branch", "commit"])
def test_offline_revision_not_in_cache(hub, tiny, tmp_path, command, revision):
    """The model is cached, that revision is not: the message must name the revision."""
    lay_out(hub, tiny)
    result = invoke(*args(command, tmp_path, "--revision", revision))
    line = assert_fails(result, 2, REPO)
    assert f"'{revision}'" in line or f"@{revision}" in line, f"the revision is not named: {line}"
    assert_clean(tmp_path, tmp_path / "pkg")


def test_offline_cached_revision_builds(hub, tiny, tmp_path):
    """The control: the same cache and the revision it has build fine, offline."""
    lay_out(hub, tiny)
    result = invoke(*args("build", tmp_path, "--revision", COMMIT))
    assert result.exit_code == 0, result.output


def test_offline_cache_without_weights(hub, tiny, tmp_path):
    lay_out(hub, tiny, files=("config.json", "tokenizer.json", "tokenizer_config.json"))
    result = invoke(*args("build", tmp_path))
    assert_fails(result, 2, "no .safetensors weights in")
    assert_clean(tmp_path, tmp_path / "pkg")


@pytest.mark.parametrize("command", COMMANDS)
def test_network_down(hub, tmp_path, monkeypatch, command):
    """Not offline, but every connection fails (the conftest's guard): the real snapshot_download."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    result = invoke(*args(command, tmp_path))
    assert_fails(result, 1, REPO)
    assert "cannot be reached" in result.output or "could not fetch" in result.output, result.output
    assert_clean(tmp_path, tmp_path / "pkg")


def response(status: int, url: str = f"https://huggingface.co/api/models/{REPO}") -> httpx2.Response:
    return httpx2.Response(status, request=httpx2.Request("GET", url), headers={"X-Error-Message": "no"})


HUB_ERRORS = {
    # name -> (exception, what the line must say, the exit code)
    "repository-not-found": (
        lambda: errors.RepositoryNotFoundError("404 Client Error: Repository Not Found", response=response(404)),
        f"model '{REPO}' was not found on the Hugging Face Hub",
        2,
    ),
    "gated-without-token": (
        lambda: errors.GatedRepoError("401 Client Error: access to this model is restricted", response=response(401)),
        f"'{REPO}' is gated",
        2,
    ),
    "revision-not-found": (
        lambda: errors.RevisionNotFoundError("404 Client Error: Revision Not Found", response=response(404)),
        f"revision 'v9' of '{REPO}' was not found",
        2,
    ),
    "server-error-500": (
        lambda: errors.HfHubHTTPError("500 Server Error: Internal Server Error", response=response(500)),
        REPO,
        1,
    ),
    "rate-limited-429": (
        lambda: errors.HfHubHTTPError("429 Client Error: Too Many Requests", response=response(429)),
        REPO,
        1,
    ),
    "forbidden-403": (
        lambda: errors.HfHubHTTPError("403 Client Error: Forbidden", response=response(403)),
        REPO,
        2,
    ),
    "proxy-error": (lambda: httpx2.ProxyError("407 Proxy Authentication Required"), REPO, 1),
    "download-read-timeout": (lambda: httpx2.ReadTimeout("The read operation timed out"), REPO, 1),
    "connection-reset": (lambda: ConnectionResetError(104, "Connection reset by peer"), REPO, 1),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", list(HUB_ERRORS))
def test_hub_answers_with_an_error(hub, tmp_path, monkeypatch, command, name):
    make, message, code = HUB_ERRORS[name]
    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs.get("revision")))
        raise make()

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    extra = ("--revision", "v9") if name == "revision-not-found" else ()
    result = invoke(*args(command, tmp_path, *extra))
    assert calls, "snapshot_download was not called"
    assert_fails(result, code, message)
    assert_clean(tmp_path, tmp_path / "pkg")
