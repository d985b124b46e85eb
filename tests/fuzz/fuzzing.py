"""What every fuzzed parser must do with any input (issue #36), and the strategies the fuzz tests share.

The property: a parser given any bytes returns, or raises a `GqaExportError` whose exit code is a
documented one (errors.py: 2 bad input, 1 a failed run) and whose message is one line; any other
exception is a traceback the user would see, and fails the test with it. Nothing may be written
outside the folder the test gives the parser as its output (`untouched` checks the inputs' folder).

Example counts are small in the suite (the whole tests/fuzz folder runs in well under a minute):
`GQA_FUZZ_SCALE=N` multiplies every test's count for a long run by hand (docs/testing.md), and the
count of inputs each parser was given is printed at the end of the session (`COUNTS`).
"""

from __future__ import annotations

import json
import os
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from gqa_export.cli import app
from gqa_export.errors import GqaExportError

SCALE = max(1, int(os.environ.get("GQA_FUZZ_SCALE", "1")))
COUNTS: Counter[str] = Counter()
EXIT_CODES = {1, 2}  # errors.py: RunError / SmokeRunError / PackageLintError 1, InputError 2
T = TypeVar("T")


def examples(count: int) -> settings:
    """`count` inputs in the suite (derandomized: the same ones every run), `count * GQA_FUZZ_SCALE`
    random ones in a long run; no example database is written into the checkout. A failure is
    reported as found, not shrunk (shrinking a config.json took five minutes)."""
    return settings(
        max_examples=count * SCALE,
        deadline=None,
        database=None,
        derandomize=SCALE == 1,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: it took minutes on a build
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


def count(parser: str) -> None:
    """One more input for `parser` (each test calls it once per generated example)."""
    COUNTS[parser] += 1


def outcome(parser: str, call: Callable[[], T]) -> T | GqaExportError:
    """`call()`'s value, or the documented error it raised (checked: exit code, one line);
    `parser` names the input's kind in a failure."""
    try:
        return call()
    except GqaExportError as exc:
        message = str(exc)
        assert exc.exit_code in EXIT_CODES, (exc.exit_code, message)
        assert message.strip() and "\n" not in message.strip(), repr(message)
        return exc


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@contextmanager
def untouched(folder: Path) -> Iterator[None]:
    """Nothing under `folder` (the inputs) is created, changed or removed by the parser."""
    before = snapshot(folder)
    yield
    assert snapshot(folder) == before, "a parser wrote next to its inputs"


def cli(parser: str, *args: object) -> Result:
    """The command in this process: a documented exit code, no traceback, an error as one stderr
    line (exit 1 may instead be a report on stdout: `verify`'s FAILED verdict)."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1", "COLUMNS": "400"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        raise AssertionError("".join(traceback.format_exception(*result.exc_info)))
    assert result.exit_code in {0} | EXIT_CODES, (result.exit_code, result.output)
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    if result.exit_code == 2 or errors:  # exit 1 may be a report on stdout (verify: FAILED ...)
        # progress lines (`> fetch ...`) may come first; the error is one line, and the last
        assert len(errors) == 1 and errors[0] == len(lines) - 1, result.stderr
    return result


# any JSON value, small: what a hand-edited or corrupted JSON file can hold where a field was
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def dumps(value: Any) -> str:
    """JSON as Python writes it, NaN and Infinity included (json.loads reads them back)."""
    return json.dumps(value)


@st.composite
def mutated_json(draw: st.DrawFn, base: dict[str, Any], keys: list[str] | None = None) -> dict[str, Any]:
    """`base` with a few keys dropped or set to any JSON value, at any depth of nested objects
    (a list's items too): missing keys, wrong types and odd values where the parser expects one."""
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        holder: Any = data
        present = [k for k in (keys or list(data)) if k in data]
        key: Any = draw(st.sampled_from(present)) if present else None
        while key is not None and isinstance(holder[key], (dict, list)) and holder[key] and draw(st.booleans()):
            holder = holder[key]
            key = draw(st.sampled_from(list(holder) if isinstance(holder, dict) else range(len(holder))))
        if key is None:
            break
        if isinstance(holder, dict) and draw(st.integers(0, 3)) == 0:
            holder.pop(key, None)
        else:
            holder[key] = draw(JSON_VALUES)
    return data


def flipped_bytes(raw: bytes, limit: int | None = None) -> st.SearchStrategy[bytes]:
    """`raw` with a few bytes overwritten, cut short or with bytes inserted (within the first `limit`)."""
    end = min(len(raw), limit or len(raw))

    @st.composite
    def strategy(draw: st.DrawFn) -> bytes:
        data = bytearray(raw)
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["set", "set", "set", "cut", "insert"]))
            at = draw(st.integers(0, max(0, min(end, len(data)) - 1)))
            if kind == "set" and at < len(data):
                data[at] = draw(st.integers(0, 255))
            elif kind == "cut":
                del data[at:]
            else:
                data[at:at] = draw(st.binary(min_size=1, max_size=8))
        return bytes(data)

    return strategy()
