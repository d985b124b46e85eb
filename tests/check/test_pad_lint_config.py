"""The pad-id lint on a hand-edited genai_config.json (found by the long fuzz run, issue #36):
a `bos_token_id` that is a list, or a `decoder` / `sliding_window` that is not an object, raised a
TypeError/AttributeError traceback from `inspect`; the lint reads what it understands."""

from __future__ import annotations

import pytest

from gqa_export.check.pad_lints import pad_findings


class _Package:
    def __init__(self, model: dict) -> None:
        self.config = {"model": model}


@pytest.mark.parametrize(
    "odd",
    [{"bos_token_id": [1, 2]}, {"bos_token_id": {"a": 1}}, {"decoder": [1]}, {"decoder": {"sliding_window": 3}}],
    ids=["bos-a-list", "bos-an-object", "decoder-a-list", "window-a-number"],
)
def test_odd_values_are_read_as_absent(odd):
    model = {"pad_token_id": 1, "eos_token_id": 1, "decoder": {}, **odd}
    findings = pad_findings(_Package(model), 0)  # type: ignore[arg-type]
    assert [f.id for f in findings] == ["pad-id-eos"]  # pad 1 is the eos id; no window read from the odd values


@pytest.mark.parametrize(
    ("config", "manifest"),
    [
        ({"search": {"max_length": {"a": 1}}, "model": {}}, {"model": [1, 2]}),
        ({"search": [], "model": {"context_length": "long"}}, {"model": {"attention_windows": [{"w": 1}]}}),
    ],
    ids=["max_length-an-object", "search-a-list"],
)
def test_the_package_summary_reads_odd_values_as_absent(tmp_path, config, manifest):
    """`inspect`'s summary (check/reader.py) on a hand-edited genai_config / manifest: found by the
    long fuzz run, int() of an object and .get of a list raised tracebacks."""
    from gqa_export.check.reader import Package

    package = Package(tmp_path, config, [], None, None, {}, [], manifest=manifest)
    assert package.max_length is None and package.attention_windows is None
