"""click's usage errors come as one line, exit 2, for every command (#34 item 12).

An option typo, a value outside a choice, a value of the wrong type, a missing argument, an option
without its value, an unknown command: typer printed a usage line, a "Try ... --help" line and a
boxed panel. Here every command (found by walking the app, so a new one is covered) must print
exactly one stderr line, `error: ...`, with click's suggestion where it makes one and where the
help is, nothing on stdout, and exit 2.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


def _commands(group: Any = None, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    group = group or typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        found.append((*path, name))
        if hasattr(command, "commands"):
            found += _commands(command, (*path, name))
    return found


COMMANDS = _commands()


def one_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == "" and "╭" not in result.output and "Usage:" not in result.output, result.output
    return lines[0]


def test_every_command_is_walked():
    assert {("build",), ("run",), ("eval",), ("recipes",), ("recipes", "show"), ("adapter",)} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_option_is_one_line(command):
    line = one_line([*command, "--no-such-option"])
    assert "No such option: --no-such-option" in line and f"{' '.join(command)} --help')" in line, line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "pkg", "--promt", "Hi"], "No such option: --promt (Possible options: --prompt)"),
        (["buidl"], "No such command 'buidl'. Did you mean 'build'?"),
        (["build", "m", "-o", "out", "--ep", "tpu"], "Invalid value for '--ep': 'tpu' is not one of 'cpu', 'cuda'"),
        (["run", "pkg", "--max-new-tokens", "many"], "Invalid value for '--max-new-tokens'"),
        (["run"], "Missing argument 'PACKAGE'"),
        (["build", "m"], "Missing option '-o' / '--output'"),
        (["build", "m", "-o"], "Option '-o' requires an argument"),
        (["recipes", "show"], "Missing argument"),
        (["build", "m", "-o", "out", "--encoder-precision", "int4"], "'int4' is not one of 'float', 'int8'"),
    ],
)
def test_usage_errors_keep_clicks_words_and_suggestion(args, says):
    line = one_line(args)
    assert says in line and "Value error" not in line, line
    if args[0] != "buidl" and "requires an argument" not in says:
        assert "--help')" in line, line  # where the help is


def test_help_and_version_still_exit_0():
    assert runner.invoke(app, ["run", "--help"]).exit_code == 0
    assert runner.invoke(app, ["--version"]).exit_code == 0
    assert runner.invoke(app, []).exit_code == 2  # no command: the help, as before


def test_mutant_typers_own_handler_prints_a_box(monkeypatch):
    """The typer path this replaces: its usage line and boxed panel fail the contract above."""
    from typer.core import TyperGroup

    from gqa_export.cli.app import OneLineUsageErrors

    monkeypatch.setattr(OneLineUsageErrors, "main", TyperGroup.main)
    with pytest.raises(AssertionError):
        one_line(["run", "pkg", "--promt", "Hi"])
