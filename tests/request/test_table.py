"""Every build option is declared once (gqa_export/request/table.py) and everything that lists
options is derived from the declarations: the `build` and `quantize` command lines, the release
spec's keys, the README's options table, the request a set of values makes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer

from gqa_export.cli import app
from gqa_export.release.spec import SCHEMA
from gqa_export.request.records import BuildOptions
from gqa_export.request.table import BUILD, FETCH, OPTIONS, QUANTIZE, RELEASE, VARIANT, for_command
from gqa_export.request.values import README_BEGIN, README_END, readme_table, with_values

README = Path(__file__).resolve().parents[2] / "README.md"
# fields no option sets: the command's arguments, and what only a multimodal plan turns on
UNDECLARED = {"model", "output", "io.mrope_positions"}
RELEASE_ONLY = {"source!", "name", "repo", "base_model", "license", "tags", "eval", "variants!"}
VARIANT_ONLY = {"adapters", "path", "gate"}


def _fields(record: object, prefix: str = "") -> set[str]:
    """Every leaf field of a request record, nested records as `record.field`."""
    out = set()
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        if dataclasses.is_dataclass(value):
            out |= _fields(value, f"{prefix}{f.name}.")
        else:
            out.add(f"{prefix}{f.name}")
    return out


def test_every_request_field_is_declared_once():
    """A field of the request with no declaration (or two) fails: adding an option is one entry."""
    declared = [option.field for option in OPTIONS if option.field]
    assert len(declared) == len(set(declared))
    assert set(declared) | UNDECLARED == _fields(BuildOptions("m", Path("o")))


def test_the_declared_defaults_are_the_requests_own():
    defaults = {option.key: option.default for option in OPTIONS}
    assert with_values(BuildOptions("m", Path("o")), defaults) == BuildOptions("m", Path("o"))


def _flags(command: str) -> set[str]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {flag for p in click_command.params for flag in (*p.opts, *p.secondary_opts) if flag.startswith("-")}


@pytest.mark.parametrize("command", [BUILD, QUANTIZE, FETCH])
def test_the_command_lines_are_the_declarations(command):
    own = {"--help", "-o", "--output"} if command != FETCH else {"--help", "-q", "--quiet"}
    declared = {flag for option in for_command(command) for spelled in option.flags for flag in spelled.split("/")}
    assert _flags(command) - own == declared


def test_the_release_spec_keys_are_the_declarations():
    variant = {key.rstrip("!") for key in SCHEMA["variants!"][0]}
    assert variant - VARIANT_ONLY == {option.key for option in OPTIONS if VARIANT in option.commands}
    top = {key for key in SCHEMA if key not in RELEASE_ONLY}
    assert top == {option.key for option in OPTIONS if RELEASE in option.commands}


def test_the_readme_table_is_generated_from_the_declarations():
    """Regenerate with `python -m gqa_export.request.values README.md`."""
    text = README.read_text()
    found = re.search(re.escape(README_BEGIN) + r"\n(.*?)\n" + re.escape(README_END), text, re.S)
    assert found, "README.md lacks the generated options table's markers"
    assert found.group(1) == readme_table()


def test_a_changed_declaration_fails_the_readme_check(monkeypatch):
    """The check above can fail: an option's help changed and the README not regenerated."""
    from gqa_export.request import values

    text, table = README.read_text(), readme_table()
    assert table in text
    changed = tuple(dataclasses.replace(o, doc="changed") if o.key == "ep" else o for o in OPTIONS)
    monkeypatch.setattr(values, "OPTIONS", changed)
    assert values.readme_table() != table and values.readme_table() not in text
