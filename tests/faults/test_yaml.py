"""Recipes (`build --recipe FILE`) and release specs (`release SPEC`) that are wrong: every key of
both schemas given a value of the wrong type, unknown keys at every level, documents that are not
a mapping, duplicate keys, YAML that does not parse, alias bombs, oversized and deeply nested files.

Every case: exit 2 and one line naming the file (and, where the mistake has one, its line and
dotted key), fast, with nothing at -o.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from common import assert_clean, assert_fails, invoke

from gqa_export import recipes
from gqa_export.release import spec as release_spec
from gqa_export.yaml_schema import MAX_NODES, MAX_YAML_BYTES

WRONG = {str: 12345, bool: "wrong-bool", int: "wrong-int", float: "wrong-float"}


def wrong_value(schema: Any) -> Any:
    if isinstance(schema, dict):
        return "wrong-mapping"
    if isinstance(schema, list):
        return "wrong-list"
    if isinstance(schema, tuple):
        return "wrong-choice"
    return WRONG[schema]


def minimal(schema: Any) -> Any:
    """A valid value: required keys only, empty lists, the first choice."""
    if isinstance(schema, dict):
        return {k[:-1]: minimal(v) for k, v in schema.items() if k.endswith("!")}
    if isinstance(schema, list):
        return []
    if isinstance(schema, tuple):
        return schema[0]
    return {str: "x", bool: True, int: 1, float: 1.0}[schema]


def sub(schema: dict, key: str) -> Any:
    return schema[key] if key in schema else schema[key + "!"]


def nodes(schema: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every node of a schema (mappings, lists, list items, scalars) with its path."""
    out = [(path, schema)] if path else []
    if isinstance(schema, dict):
        for key, value in schema.items():
            out += nodes(value, (*path, key.rstrip("!")))
    elif isinstance(schema, list):
        out += nodes(schema[0], (*path, 0))
    return out


def place(doc: Any, schema: Any, path: tuple, value: Any) -> Any:
    """`doc` with the node at `path` set to `value` (missing mappings and list items made valid)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        item = doc[0] if isinstance(doc, list) and doc else minimal(schema[0])
        return [place(item, schema[0], rest, value)]
    out = dict(doc) if isinstance(doc, dict) else {}
    out[head] = place(out.get(head, minimal(sub(schema, head))), sub(schema, head), rest, value)
    return out


def dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def line_of(text: str, marker: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} found on lines {hits} of:\n{text}"
    return hits[0]


def recipe_base(tiny: Path) -> dict[str, Any]:
    return {"name": "mine", "match": {"model_types": ["llama"]}, "arch": "llama"}


def spec_base(tiny: Path) -> dict[str, Any]:
    return {
        "source": str(tiny),
        "license": "apache-2.0",
        "smoke": False,
        "variants": [{"ep": "cpu", "precision": "fp32"}],
    }


KINDS = {
    # kind -> (schema, base document, command line for FILE and OUT)
    "recipe": (recipes.SCHEMA, recipe_base, lambda tiny, file, out: ["build", tiny, "-o", out, "--recipe", file]),
    "spec": (release_spec.SCHEMA, spec_base, lambda tiny, file, out: ["release", file, "-o", out]),
}


def run(kind: str, tiny: Path, tmp_path: Path, text: str | bytes, *extra: str):
    file = tmp_path / f"{kind}.yaml"
    if isinstance(text, bytes):
        file.write_bytes(text)
    else:
        file.write_text(text)
    out = tmp_path / "out"
    started = time.perf_counter()
    result = invoke(*KINDS[kind][2](tiny, file, out), *extra)
    return file, out, result, time.perf_counter() - started


WRONG_TYPES = [(kind, path) for kind, (schema, _, _) in KINDS.items() for path, _ in nodes(schema)]


@pytest.mark.parametrize(("kind", "path"), WRONG_TYPES, ids=[f"{k}:{dotted(p)}" for k, p in WRONG_TYPES])
def test_wrong_type_names_file_line_and_key(tiny, tmp_path, kind, path):
    schema, base, _ = KINDS[kind]
    node = dict(nodes(schema))[path]
    bad = wrong_value(node)
    text = yaml.safe_dump(place(base(tiny), schema, path, bad), sort_keys=False)
    file, out, result, _ = run(kind, tiny, tmp_path, text)
    assert_fails(result, 2, f"{file}:{line_of(text, str(bad))}: {dotted(path)}: expected")
    assert_clean(tmp_path, out)


MAPPINGS = [
    (kind, path)
    for kind, (schema, _, _) in KINDS.items()
    for path in [(), *(p for p, node in nodes(schema) if isinstance(node, dict))]
]


@pytest.mark.parametrize(("kind", "path"), MAPPINGS, ids=[f"{k}:{dotted(p) or '<top>'}.bogus_key" for k, p in MAPPINGS])
def test_unknown_key_names_file_line_and_key(tiny, tmp_path, kind, path):
    schema, base, _ = KINDS[kind]
    doc = base(tiny)
    node = schema
    for part in path:
        node = node[0] if isinstance(part, int) else sub(node, part)
    current = doc
    for part in path:  # the mapping at `path` as the base document has it (or a minimal one)
        current = (current[0] if current else None) if isinstance(part, int) else (current or {}).get(part)
    mapping = dict(current) if isinstance(current, dict) else minimal(node)
    mapping["bogus_key"] = "here"
    text = yaml.safe_dump(place(doc, schema, path, mapping) if path else mapping, sort_keys=False)
    file, out, result, _ = run(kind, tiny, tmp_path, text)
    key = f"{dotted(path)}.bogus_key" if path else "bogus_key"
    assert_fails(result, 2, f"{file}:{line_of(text, 'bogus_key')}: unknown key '{key}'")
    assert_clean(tmp_path, out)


def bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def oversized(kind: str, tiny: Path) -> str:
    text = yaml.safe_dump(KINDS[kind][1](tiny), sort_keys=False)
    return text + ("# padding padding padding padding padding padding padding\n" * (MAX_YAML_BYTES // 50))


DOCUMENTS = {
    # name -> (text or a function of (kind, tiny), message, the line the message must name or None)
    "a-list": ("- a\n- b\n", "expected a mapping", 1),
    "a-scalar": ("just some text\n", "expected a mapping", 1),
    "null": ("~\n", "expected a mapping", 1),
    "empty-file": ("", "is empty", None),
    "only-comments": ("# nothing here\n", "is empty", None),
    "two-documents": ("a: 1\n---\nb: 2\n", "not valid YAML", None),
    "tab-indent": ("a:\n\tb: 1\n", "not valid YAML", 2),
    "unclosed-bracket": ("a: [1, 2\nb: 3\n", "not valid YAML", None),
    "alias-bomb": (bomb(), f"expands to more than {MAX_NODES} YAML nodes", None),
    "recursive-alias": ("a: &x [1, *x]\n", f"expands to more than {MAX_NODES} YAML nodes", None),
    "deeply-nested": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 64 levels", None),
    "oversized": (oversized, f"at most {MAX_YAML_BYTES} bytes", None),
    "not-utf8": (b"name: caf\xe9\n", "is not UTF-8 text", None),
    # found by tests/fuzz: PyYAML's reader error spans two lines ('\n  in "<unicode string>"')
    "control-character": ("name: a\x1f\n", "special characters are not allowed in", None),
    # found by the long fuzz run: an unknown key holding a line break was printed on two lines
    "key-with-a-line-break": ('"a\\nb": 1\n', "unknown key 'a\\nb'", 1),
    "duplicate-top-key": (
        lambda kind, tiny: (
            yaml.safe_dump(KINDS[kind][1](tiny), sort_keys=False) + "license: twice\n"
            if kind == "spec"
            else yaml.safe_dump(KINDS[kind][1](tiny), sort_keys=False) + "name: twice\n"
        ),
        "is given twice",
        "last",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_bad_document(tiny, tmp_path, kind, name):
    text, message, line = DOCUMENTS[name]
    text = text(kind, tiny) if callable(text) else text
    file, out, result, seconds = run(kind, tiny, tmp_path, text)
    if line == "last":
        line = len(text.splitlines())
    where = f"{file}:{line}:" if line else str(file)
    error = assert_fails(result, 2, where)
    assert message in error, error
    assert seconds < 10, f"took {seconds:.1f} s"
    assert_clean(tmp_path, out)


def test_duplicate_nested_keys(tiny, tmp_path):
    text = "name: mine\nmatch:\n  model_types: [llama]\narch: llama\nattention:\n  mode: gqa\n  mode: bias\n"
    file, _, result, _ = run("recipe", tiny, tmp_path, text)
    assert_fails(result, 2, f"{file}:7: key 'attention.mode' is given twice")


def test_duplicate_key_in_a_variant(tiny, tmp_path):
    text = f"source: {tiny}\nlicense: mit\nvariants:\n  - ep: cpu\n    precision: fp32\n    ep: cuda\n"
    file, _, result, _ = run("spec", tiny, tmp_path, text)
    assert_fails(result, 2, f"{file}:6: key 'variants[0].ep' is given twice")


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("what", ["missing", "a-folder"])
def test_unreadable_file(tiny, tmp_path, kind, what):
    file = tmp_path / f"{kind}.yaml"
    if what == "a-folder":
        file.mkdir()
    out = tmp_path / "out"
    result = invoke(*KINDS[kind][2](tiny, file, out))
    assert_fails(result, 2, str(file))
    assert_clean(tmp_path, out)


# `--set key=value` merges into the recipe text before it is validated: the same file faults
SET_CASES = {
    "invalid-yaml": ("name: mine\nmatch: [unclosed\n", "not valid YAML"),
    "a-list": ("- a\n- b\n", "mapping"),
    "deeply-nested": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 64 levels"),
    "alias-bomb": (bomb(), f"more than {MAX_NODES}"),
    "wrong-type-by-set": (yaml.safe_dump(recipe_base(Path())), "attention.packed_qkv"),
}


@pytest.mark.parametrize("name", list(SET_CASES))
def test_recipe_with_set(tiny, tmp_path, name):
    text, message = SET_CASES[name]
    setting = "attention.packed_qkv=maybe" if name == "wrong-type-by-set" else "attention.mode=gqa"
    file, out, result, seconds = run("recipe", tiny, tmp_path, text, "--set", setting)
    # a --set that breaks the schema is named as the flag (checked before anything is read); a
    # broken recipe file is named as the file
    line = assert_fails(result, 2, f"--set {setting}" if name == "wrong-type-by-set" else str(file))
    assert message in line
    assert seconds < 10, f"took {seconds:.1f} s"
    assert_clean(tmp_path, out)


@pytest.mark.parametrize("key", ["[/]", "[bold]x"], ids=["closing-markup-tag", "opening-markup-tag"])
def test_unknown_key_with_brackets(tiny, tmp_path, key):
    text = f'name: mine\nmatch:\n  model_types: [llama]\narch: llama\n"{key}": 1\n'
    file, _, result, _ = run("recipe", tiny, tmp_path, text)
    assert_fails(result, 2, f"{file}:5: unknown key '{key}'")
