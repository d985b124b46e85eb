"""Fuzzed config.json and generation_config.json (issue #36): what `build` reads before any export.

A valid tiny Llama's config edited: keys dropped (missing), set to any JSON value (wrong types:
lists, strings, NaN, 2**64), the size keys set to small integers that contradict each other or the
weights (heads not dividing hidden_size, more KV heads than heads, a head_dim that disagrees, a
vocabulary the embedding does not have), unknown model types and architectures; the text cut
short. `source_dims` (config -> recipe -> transformers' config -> ModelDims) and the checks against
the weights must return or refuse in one line; a few go through `build` on the command line.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

from fuzzing import JSON_VALUES, cli, count, examples, mutated_json, outcome, untouched
from hypothesis import given
from hypothesis import strategies as st

from gqa_export.arch import get_spec
from gqa_export.errors import GqaExportError
from gqa_export.recipes import builtin_recipes
from gqa_export.source.checkpoint import match_builtin, source_dims
from gqa_export.source.consistency import check_against_weights
from gqa_export.source.weights import WeightStore

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"
CONFIG = json.loads((TINY / "config.json").read_text())
GENERATION = json.loads((TINY / "generation_config.json").read_text())
SIZES = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
         "num_hidden_layers", "vocab_size", "max_position_embeddings"]  # fmt: skip
MODEL_TYPES = sorted({t for r in builtin_recipes() for t in r.model_types})
_folders = itertools.count()


@st.composite
def configs(draw: st.DrawFn) -> str:
    config = json.loads(json.dumps(CONFIG))
    kind = draw(st.sampled_from(["sizes", "sizes", "any", "type"]))
    if kind == "sizes":  # contradictory sizes: the consistency checks behind the parser
        for key in draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=3, unique=True)):
            config[key] = draw(st.integers(-2, 130) | st.sampled_from([2**31, 2**63, 2**64]))
    elif kind == "type":  # another family's name on a Llama config, or no name at all
        config["model_type"] = draw(st.sampled_from(MODEL_TYPES) | JSON_VALUES)
        config["architectures"] = draw(st.lists(st.text(max_size=20), max_size=2) | JSON_VALUES)
    else:
        config = draw(mutated_json(config))
    text = json.dumps(config)
    if draw(st.integers(0, 15)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _checkpoint(tmp_path: Path, config: str, generation: str | None = None) -> Path:
    folder = tmp_path / f"m{next(_folders)}"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).symlink_to(TINY / name)
    (folder / "config.json").write_text(config)
    (folder / "generation_config.json").write_text(generation if generation is not None else json.dumps(GENERATION))
    return folder


def _read(folder: Path) -> None:
    with untouched(folder):
        dims = outcome("config.json", lambda: source_dims(folder))
        if isinstance(dims, GqaExportError):
            return
        raw = json.loads((folder / "config.json").read_text())
        spec = get_spec(match_builtin(raw, folder).arch)
        outcome("config.json", lambda: check_against_weights(dims, spec, WeightStore.open(folder)))


@examples(20)
@given(config=configs())
def test_edited_configs_read_or_fail_in_one_line(tmp_path, config):
    count("config.json")
    _read(_checkpoint(tmp_path, config))


@examples(10)
@given(generation=st.builds(json.dumps, st.just(GENERATION).flatmap(mutated_json)) | st.text(max_size=30))
def test_edited_generation_configs_read_or_fail_in_one_line(tmp_path, generation):
    count("generation_config.json")
    _read(_checkpoint(tmp_path, json.dumps(CONFIG), generation))


@examples(3)
@given(config=configs())
def test_build_with_an_edited_config_exits_as_documented(tmp_path, config):
    """The command line: refused in one line, or a package (a config edit the export ignores)."""
    count("config.json (build CLI)")
    folder = _checkpoint(tmp_path, config)
    out = tmp_path / f"out{next(_folders)}"
    with untouched(folder):
        result = cli("config.json CLI", "build", folder, "-o", out, "--no-smoke", "-q")
    assert out.is_dir() is (result.exit_code == 0)
    shutil.rmtree(out, ignore_errors=True)
