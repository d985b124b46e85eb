"""YAML files checked against a small schema: recipes and release specs.

Errors name the file, the line and the dotted key, so a user can jump straight to the mistake.
The text is parsed with `yaml.compose` (nodes keep their line numbers) and only then turned into
Python values, one scalar at a time with the safe loader: no tags, no arbitrary objects.

A schema node is a type (str/bool/int/float), a tuple of allowed strings, a one-element list (a
list of that), or a dict of key -> node. Keys ending in "!" are required.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gqa_export.errors import InputError

# Recipes and specs are a few KiB. The limits keep a hostile file from costing memory or time: a
# large file is refused before it is read, and anchors/aliases (which YAML expands by reference,
# "billion laughs") are refused when the document they expand to exceeds MAX_NODES.
MAX_YAML_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64  # recipes nest 4 levels; deeper is a hostile or broken file

# libyaml's parser where PyYAML was built with it (the wheels are): a build reads every shipped
# recipe to match the checkpoint, and the pure-Python parser made that a tenth of a second.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Scalars become values with the safe constructor: the tag the composer resolved (int, float, bool,
# null, str) decides the type, nothing else can be built.
_SCALARS = yaml.constructor.SafeConstructor()


def read_yaml(path: Path, what: str) -> str:
    """The text of a recipe or spec file; one line for a missing, huge or non-UTF-8 file."""
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise InputError(f"{what} {path} is {size} bytes; a {what} is at most {MAX_YAML_BYTES} bytes")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not UTF-8 text") from None


def compose(text: str, path: Path, what: str) -> yaml.Node:
    """The YAML node tree of `text`; one-line errors for bad YAML, an empty or oversized document."""
    if len(text) > MAX_YAML_BYTES:
        raise InputError(f"{path}: the {what} is larger than {MAX_YAML_BYTES} bytes")
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError:  # the pure-Python parser words the error and its line as we document
        node = _compose_slowly(text, path, what)
    if node is None:
        raise InputError(f"{path}: the {what} is empty")
    try:
        size = _expanded_size(node, {}, 0)
    except InputError as exc:
        raise InputError(f"{path}: the {what} is not accepted: {exc}") from None
    if size > MAX_NODES:
        raise InputError(
            f"{path}: the {what} expands to more than {MAX_NODES} YAML nodes (anchors and aliases); "
            "write it out without the aliases"
        )
    return node


def _compose_slowly(text: str, path: Path, what: str) -> yaml.Node:
    """Bad YAML's one-line error, from PyYAML's own parser (libyaml words errors and places marks
    differently); a document that parses here after all is returned."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise InputError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # a ReaderError's is 2 lines
        raise InputError(f"{path}{where}: not valid YAML ({problem})") from None


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int) -> int:
    """Nodes the document has once every alias is expanded; shared nodes are counted once each
    time they are referenced, but computed once (memo), so a bomb is measured in linear time."""
    if id(node) in memo:
        return memo[id(node)]
    if depth > MAX_DEPTH:
        raise InputError(f"a YAML document nests deeper than {MAX_DEPTH} levels")
    memo[id(node)] = MAX_NODES + 1  # a recursive alias expands forever
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, memo, depth + 1) for item in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def validate(node: yaml.Node, schema: Any, path: Path, key: str = "") -> Any:
    """The plain Python value of `node`, checked against `schema`."""
    where = f"{path}:{node.start_mark.line + 1}: {key or '<top>'}"
    if isinstance(schema, dict):
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{where}: expected a mapping")
        allowed = {k.rstrip("!"): v for k, v in schema.items()}
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            name = key_node.value
            full = f"{key}.{name}" if key else name
            if name not in allowed:  # a key with a line break or a control character shown escaped: one line
                shown = full if full.isprintable() else repr(full)[1:-1]
                raise InputError(
                    f"{path}:{key_node.start_mark.line + 1}: unknown key '{shown}' (allowed here: {', '.join(allowed)})"
                )
            if name in out:
                raise InputError(f"{path}:{key_node.start_mark.line + 1}: key '{full}' is given twice")
            out[name] = validate(value_node, allowed[name], path, full)
        for k in schema:
            if k.endswith("!") and k[:-1] not in out:
                raise InputError(f"{where}: missing required key '{k[:-1]}'")
        return out
    if isinstance(schema, list):
        if not isinstance(node, yaml.SequenceNode):
            raise InputError(f"{where}: expected a list")
        return [validate(item, schema[0], path, f"{key}[{i}]") for i, item in enumerate(node.value)]
    if not isinstance(node, yaml.ScalarNode):
        raise InputError(f"{where}: expected a single value")
    value = _SCALARS.construct_object(node)
    if isinstance(schema, tuple):
        if value not in schema:
            raise InputError(f"{where}: expected one of {', '.join(schema)}, got {value!r}")
        return value
    if schema is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (schema is int and isinstance(value, bool)) or not isinstance(value, schema):
        raise InputError(f"{where}: expected {schema.__name__}, got {value!r}")
    return value
