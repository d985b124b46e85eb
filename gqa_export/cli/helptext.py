"""How `--help` names things: usage lines and the value each option takes.

Newer typers show a Python type after every option (`--keep-float <list[str]>`, `--overwrite
<bool>`), which reads as code, not as what to type. Here a flag shows nothing after it, a choice
keeps its `<a|b|c>` (generated from the tables the code validates against), an argument shows only
its name (MODEL, PACKAGE), and any other option shows a word for its value (`N`, `NUMBER`, `TEXT`,
`PATH`) unless the option names its own (`--set KEY=VALUE`). Older typers already print click's
words; they are left alone.
"""

from __future__ import annotations

from typing import Any, get_args

import click
from typer.core import TyperCommand, TyperGroup

_WORDS: dict[Any, str] = {int: "N", float: "NUMBER", str: "TEXT"}


def readable_metavar(param: Any) -> None:
    """Give a parameter the value word people read (see the module docstring)."""
    if param.param_type_name == "argument":
        if hasattr(param, "display_type_rich"):  # its name (MODEL, PACKAGE) says what it is
            param.display_type_rich = lambda ctx: None
        return
    if param.param_type_name != "option" or param.metavar is not None:
        return
    if getattr(param, "is_flag", False):
        param.metavar = ""
        return
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or descriptor.is_choice:
        return
    if descriptor.is_path:
        param.metavar = "PATH"
        return
    annotation = get_args(descriptor.annotation)[0] if descriptor.is_list else descriptor.annotation
    word = _WORDS.get(annotation)
    if word is not None:
        param.metavar = word


def light_flag(param: Any) -> None:
    """A flag's value coerced without pydantic. Newer typers build a pydantic TypeAdapter for any
    parameter whose value is not already a bool, including the group's unset --help and completion
    flags on every run: a tenth of a second of imports before `--help` prints. A bool needs no
    adapter; typer's own pass-through coercion (checks the type, returns the value) does it. An
    older typer without that class, or a parameter already set up, is left as it is."""
    try:
        from typer._coercion import PassThroughRuntimeParam
    except ImportError:
        return
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or descriptor.annotation is not bool or getattr(param, "_runtime_param", False) is not None:
        return
    param._runtime_param = PassThroughRuntimeParam(annotation=bool, parameter_info=descriptor.parameter_info)


def _readable(params: list[click.Parameter]) -> list[click.Parameter]:
    for param in params:
        readable_metavar(param)
        light_flag(param)
    return params


class Command(TyperCommand):
    """Usage lines as `gqa-export build [OPTIONS] MODEL` (newer typers brace required arguments)
    and readable metavars."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [piece.strip("{}") for piece in super().collect_usage_pieces(ctx)]

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _readable(super().get_params(ctx))


class Group(TyperGroup):
    """The command groups (`gqa-export`, `gqa-export recipes`): readable metavars too."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return _readable(super().get_params(ctx))
