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


class Command(TyperCommand):
    """Usage lines as `gqa-export build [OPTIONS] MODEL` (newer typers brace required arguments)
    and readable metavars."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [piece.strip("{}") for piece in super().collect_usage_pieces(ctx)]

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            readable_metavar(param)
        return params


class Group(TyperGroup):
    """The command groups (`gqa-export`, `gqa-export recipes`): readable metavars too."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            readable_metavar(param)
        return params
