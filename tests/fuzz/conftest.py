"""The fuzz folder's summary: how many inputs each parser saw (the long run's count, docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuzzing import COUNTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not COUNTS:
        return
    total = sum(COUNTS.values())
    parts = ", ".join(f"{name} {count}" for name, count in sorted(COUNTS.items()))
    terminalreporter.write_line(f"fuzzed inputs: {total} ({parts})")
    out = os.environ.get("GQA_FUZZ_COUNTS")
    if out:  # the long run records its count
        Path(out).write_text("".join(f"{name}\t{count}\n" for name, count in sorted(COUNTS.items())))
