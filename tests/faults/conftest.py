"""Fixtures of the fault-injection suite: a tiny checkpoint and package to break (copies), a
network that refuses every connection, and a time limit per in-process test (a fault that makes
the CLI hang must fail its test, not the whole run)."""

from __future__ import annotations

import shutil
import signal
import socket
from pathlib import Path

import pytest

TEST_SECONDS = 120


class Hung(Exception):
    """An in-process test ran past TEST_SECONDS."""


@pytest.fixture(autouse=True)
def time_limit():
    def expired(signum, frame):
        raise Hung(f"the test ran for more than {TEST_SECONDS} s (a hang?)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_SECONDS)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Nothing may be fetched: every TCP connection and name lookup fails as if the network were down."""

    def refuse(self, address, *args, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(101, "Network is unreachable (blocked by the fault tests)")
        return real_connect(self, address, *args, **kwargs)

    def no_lookup(host, *args, **kwargs):
        if host in ("localhost", "127.0.0.1", "::1", None):
            return real_getaddrinfo(host, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (blocked by the fault tests)")

    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="session")
def tiny(checkpoints) -> Path:
    """The tiny random Llama (2 layers, GQA 4/2): read only; tests that break it take `model`."""
    return checkpoints.get("gqa")


@pytest.fixture
def model(tiny, tmp_path) -> Path:
    """A copy of the tiny checkpoint this test may break."""
    return Path(shutil.copytree(tiny, tmp_path / "ckpt"))


@pytest.fixture(scope="session")
def built(exports) -> Path:
    """A float package of the tiny checkpoint (cpu fp32): read only."""
    return exports.get("gqa")


@pytest.fixture
def package(built, tmp_path) -> Path:
    """A copy of the built package this test may break."""
    return Path(shutil.copytree(built, tmp_path / "pkg"))
