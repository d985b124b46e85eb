"""A tiny progress-reporting protocol, so pipeline stages never import the CLI or rich.

The CLI passes a rich-backed reporter; library callers get `NullReporter` by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

Advance = Callable[[int], None]


class Reporter(Protocol):
    def stage(self, name: str) -> None:
        """A pipeline stage starts (fetch, build, optimize, ...)."""

    def note(self, message: str) -> None:
        """A one-line remark for the user (a fallback taken, a default chosen)."""

    def task(self, description: str, total: int | None) -> AbstractContextManager[Advance]:
        """A context manager yielding an `advance(n)` callback for a progress bar."""

    def download_bar(self) -> type | None:
        """A tqdm class for huggingface_hub's download bars (None: no bars)."""


class NullReporter:
    """Reports nothing."""

    def stage(self, name: str) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    @contextmanager
    def task(self, description: str, total: int | None) -> Iterator[Advance]:
        yield lambda n=1: None

    def download_bar(self) -> type | None:
        return None


class PrefixedReporter:
    """Another reporter's stages and notes, each prefixed (a release's "[2/4 cuda/cuda-fp16]")."""

    def __init__(self, inner: Reporter, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def stage(self, name: str) -> None:
        self.inner.stage(f"{self.prefix} {name}")

    def note(self, message: str) -> None:
        self.inner.note(f"{self.prefix} {message}")

    def task(self, description: str, total: int | None) -> AbstractContextManager[Advance]:
        return self.inner.task(description, total)

    def download_bar(self) -> type | None:
        return self.inner.download_bar()
