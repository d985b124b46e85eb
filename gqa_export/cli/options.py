"""The command-line options of `build` and `quantize`, generated from the option declarations
(gqa_export/request/table.py): each declared option becomes one typer parameter with its flags,
help, panel, metavar and closed set of values, so `--help` and the release spec cannot drift from
one another or from what the code takes.

`declared(command)` gives a command body `(model, output, values)` a signature typer reads: the
body's own leading parameters, then one parameter per declared option. The body receives the
values by option key, as the command line gave them (flags turned into values: `--no-smoke` gives
`smoke=False`), and turns them into a request with `request.values.with_values`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from gqa_export.cli.app import choice_enum
from gqa_export.request.table import Option, for_command

_ENUMS: dict[tuple[str, tuple[str, ...]], Any] = {}


def _enum(option: Option) -> Any:
    """One str Enum per closed set (typer shows `[a|b|c]` and refuses anything else, exit 2)."""
    key = (option.key, tuple(option.choices or ()))
    if key not in _ENUMS:
        _ENUMS[key] = choice_enum("".join(p.title() for p in option.key.split("_")), option.choices or ())
    return _ENUMS[key]


def _parameter(option: Option) -> inspect.Parameter:
    """The typer parameter of one option: `Annotated[type, typer.Option(...)] = default`."""
    extra: dict[str, Any] = {"help": option.help, "rich_help_panel": option.panel}
    if option.metavar:
        extra["metavar"] = option.metavar
    default: Any = option.default
    if option.negated:  # --no-smoke: a flag whose value is the field's opposite
        kind, default = bool, not option.default
    elif option.choices is not None:
        kind = Optional[_enum(option)]
        default = None if option.default is None else _enum(option)(option.default)
    elif option.repeatable:
        kind, default = Optional[list[str]], None
    elif option.kind == "path":
        from pathlib import Path

        kind = Optional[Path]
    elif isinstance(option.kind, list) or option.parse:
        kind, default = Optional[str], None  # comma-separated on the command line
    elif option.kind is bool and option.default is None:
        kind = Optional[bool]  # --x/--no-x with "unset" as the default
    else:
        kind = option.kind if option.default is not None else Optional[option.kind]
    annotation = Annotated[kind, typer.Option(*option.flags, **extra)]
    name = f"no_{option.key}" if option.negated else option.key
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def given(option: Option, raw: Any) -> Any:
    """A command-line value as the option's value: enums as strings, a negated flag inverted,
    repeatable lists as tuples, comma lists parsed (request.values.parse_command_line)."""
    from gqa_export.request.values import parse_command_line

    if option.negated:
        return not raw
    if raw is None:  # not given: the declared default
        return option.default
    if option.choices is not None:
        return str(raw.value)
    if option.repeatable:
        return tuple(raw)
    if option.parse:
        return parse_command_line(option, raw)
    return raw


def declared(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give `body(*leading, values)` the declared options of `command` as typer parameters; the
    body's own parameters before `values` (MODEL, -o ...) keep their annotations."""
    options = tuple(option.on(command) for option in for_command(command))

    def wrap(body: Callable[..., None]) -> Callable[..., None]:
        leading = [p for p in inspect.signature(body, eval_str=True).parameters.values() if p.name != "values"]

        @functools.wraps(body)
        def command_body(*args: Any, **kwargs: Any) -> None:
            values = {}
            for option in options:
                name = f"no_{option.key}" if option.negated else option.key
                values[option.key] = given(option, kwargs.pop(name))
            body(*args, **kwargs, values=values)

        params = [*leading, *(_parameter(option) for option in options)]
        command_body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command_body.__annotations__ = {p.name: p.annotation for p in params}
        del command_body.__wrapped__  # typer must read this signature, not the body's
        return command_body

    return wrap
