"""Fuzzed recipes and release specs (issue #36): `load_recipe`, `load_spec` and `release` itself.

Inputs come from the schemas the code validates against (recipes.SCHEMA, release/spec.py SCHEMA,
whose variant keys are request/values.py `spec_schema`), walked into hypothesis strategies
(`from_schema`): documents that pass the schema reach the checks behind it (paths, ranges,
gates, options build would refuse). Then the same documents broken: a key dropped or set to any
value, unknown keys, raw text (YAML syntax errors, anchors, tags), bytes that are not UTF-8.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml
from fuzzing import JSON_VALUES, cli, count, examples, mutated_json, outcome, untouched
from hypothesis import given
from hypothesis import strategies as st

from gqa_export import recipes
from gqa_export.release import spec as release_spec

_files = itertools.count()


def from_schema(node: Any) -> st.SearchStrategy[Any]:
    """Documents valid under a yaml_schema node (yaml_schema.py: a type, a tuple of allowed strings,
    a one-item list, a dict whose "!" keys are required), lists and strings kept short.
    (hypothesis-jsonschema 0.23.1, the latest, fails inside its object strategy under hypothesis
    6.170, `'many' object has no attribute 'more'`; this schema language is small enough to walk.)"""
    if isinstance(node, dict):
        required = {k[:-1]: from_schema(v) for k, v in node.items() if k.endswith("!")}
        optional = {k: from_schema(v) for k, v in node.items() if not k.endswith("!")}
        return st.fixed_dictionaries(required, optional=optional)
    if isinstance(node, list):
        return st.lists(from_schema(node[0]), max_size=3)
    if isinstance(node, tuple):
        return st.sampled_from(node)
    return {
        str: st.text(max_size=12),
        bool: st.booleans(),
        int: st.integers(-(2**40), 2**40),
        float: st.floats(-1e9, 1e9),
    }[node]


def documents(schema: Any) -> st.SearchStrategy[str]:
    valid = from_schema(schema)
    broken = valid.flatmap(lambda d: mutated_json(d) if d else st.just(d))
    odd = st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4)
    return st.one_of(valid, valid, broken, odd).map(lambda d: yaml.safe_dump(d, sort_keys=False)) | st.text(max_size=80)


def _write(folder: Path, text: str | bytes) -> Path:
    path = folder / f"doc{next(_files)}.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


@examples(80)
@given(text=documents(recipes.SCHEMA))
def test_recipes_load_or_fail_in_one_line(tmp_path, text):
    count("recipe")
    path = _write(tmp_path, text)
    with untouched(tmp_path):
        outcome("recipe", lambda: recipes.load_recipe(path))


@examples(80)
@given(text=documents(release_spec.SCHEMA))
def test_release_specs_load_or_fail_in_one_line(tmp_path, text):
    count("release spec")
    (tmp_path / "t.txt").write_text("some text to evaluate on")
    path = _write(tmp_path, text)
    with untouched(tmp_path):
        outcome("release spec", lambda: release_spec.load_spec(path))


@examples(8)
@given(text=documents(release_spec.SCHEMA), raw=st.binary(max_size=40))
def test_release_cli_refuses_in_one_line_and_writes_nothing(tmp_path, text, raw):
    """`release SPEC -o OUT` (offline): a spec that loads stops at its source (not a local model
    folder, no network), every other at the spec; nothing at -o, nothing beside the spec."""
    count("release CLI")
    folder = tmp_path / f"r{next(_files)}"
    folder.mkdir()
    for spec in (_write(folder, text), _write(folder, raw)):
        with untouched(folder):
            result = cli("release CLI", "release", spec, "-o", tmp_path / "out")
        assert result.exit_code != 0 and not (tmp_path / "out").exists()
