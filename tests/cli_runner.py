"""The CLI as the tests call it: typer's CliRunner over the app, every argument turned to a string
(paths included), shared by the test modules that drive commands."""

from __future__ import annotations

from click.testing import Result
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


def invoke(*args: object) -> Result:
    return runner.invoke(app, [str(a) for a in args])
