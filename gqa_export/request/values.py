"""What the option declarations (request/table.py) derive: a request from values, the release spec's
variant schema, and the README's options table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.request.records import BuildOptions
from gqa_export.request.table import BY_KEY, COMMA_INTS, COMMA_NAMES, OPTIONS, RELEASE, VARIANT, Option

README_BEGIN = "<!-- build-options: generated from gqa_export/request/table.py (request.values.readme_table) -->"
README_END = "<!-- /build-options -->"


def with_values(request: BuildOptions, values: dict[str, Any], base: Path | None = None) -> BuildOptions:
    """`request` with each declared key of `values` set where its declaration says (nested records
    included); `base`: the folder relative paths are taken from (a release spec's)."""
    updates: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        option = BY_KEY[key]
        if not option.field:
            continue
        value = _typed(option, value, base)
        record, _, name = option.field.rpartition(".")
        if record:
            nested.setdefault(record, {})[name] = value
        else:
            updates[name] = value
    for record, fields in nested.items():
        updates[record] = replace(getattr(request, record), **fields)
    return replace(request, **updates)


def _typed(option: Option, value: Any, base: Path | None) -> Any:
    """A value as the request holds it: lists as tuples, paths as Path (relative to `base`)."""
    if value is None:
        return None
    if option.kind == "path":
        path = Path(value).expanduser()
        return base / path if base is not None and not path.is_absolute() else path
    if isinstance(value, list):
        return tuple(value)
    return value


def parse_command_line(option: Option, text: str) -> Any:
    """A comma-separated command-line value as its list (one line naming the flag otherwise)."""
    if option.parse == COMMA_INTS:
        try:
            return tuple(int(t) for t in text.split(",") if t.strip())
        except ValueError:
            raise InputError(f"{option.flag} takes comma-separated integers, got {text!r}") from None
    if option.parse == COMMA_NAMES:
        names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        bad = [n for n in names if not n.replace("_", "").isalnum()]
        if bad or not names:
            raise InputError(f"{option.flag} takes module names separated by commas (e.g. q_proj,v_proj), got {text!r}")
        return names
    return text


def spec_schema(scope: str) -> dict[str, Any]:
    """The yaml_schema nodes of a release spec's declared keys: `VARIANT` (each variant) or
    `RELEASE` (the top level); "path" values are strings there."""
    return {
        option.key + ("!" if option.required_in_spec else ""): str if option.kind == "path" else option.kind
        for option in OPTIONS
        if scope in option.commands
    }


def readme_table() -> str:
    """The README's options table: one row per option of `build`, `quantize` or a release spec."""
    rows = ["| option | release spec key | commands | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        commands = [c for c in ("build", "quantize", "fetch") if c in option.commands]
        if not commands:
            continue
        where = {(True, False): "", (False, True): " (top level)", (True, True): " (variant and top level)"}
        in_spec = (VARIANT in option.commands, RELEASE in option.commands)
        spec = f"`{option.key}`{where[in_spec]}" if any(in_spec) else "-"
        rows.append(f"| {_flag_cell(option)} | {spec} | {', '.join(commands)} | {option.doc or option.help} |")
    return "\n".join(rows)


def _flag_cell(option: Option) -> str:
    spelled = ", ".join(f"`{flag}`" for flag in option.flags)
    if option.choices is not None:
        return spelled + " `" + "\\|".join(option.choices) + "`"
    return f"{spelled} `{option.metavar}`" if option.metavar else spelled


def write_readme_table(readme: Path) -> None:
    """Put `readme_table()` between the README's markers (the test compares them)."""
    text = readme.read_text(encoding="utf-8")
    head, found, rest = text.partition(README_BEGIN + "\n")
    _, end, tail = rest.partition(README_END)
    if not found or not end:
        raise SystemExit(f"{readme} lacks the markers {README_BEGIN} ... {README_END}")
    readme.write_text(f"{head}{README_BEGIN}\n{readme_table()}\n{README_END}{tail}", encoding="utf-8")


if __name__ == "__main__":  # python -m gqa_export.request.values README.md
    import sys

    write_readme_table(Path(sys.argv[1]))
