"""The coverage table (gqa_export/arch/coverage.py): every model type the installed transformers
maps to a causal LM or an image-text-to-text model has an entry, the README's family coverage
table is generated from it, `recipes --coverage` prints it, and a refused type is refused by name,
exit 2, before any weight is read."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from families import transformers_major
from typer.testing import CliRunner

from gqa_export.arch import coverage as coverage_module
from gqa_export.arch.coverage import README_BEGIN, README_END, coverage, installed_types, readme_table
from gqa_export.arch.refused_types import NOT_APPLICABLE, REFUSED
from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.recipes import builtin_recipes, match_recipe
from gqa_export.source.weights import WeightStore

README = Path(__file__).parents[2] / "README.md"
# the table is read from transformers 5.x's mappings; 4.57 (the floor run) lists other types
FIVE = pytest.mark.skipif(transformers_major() < 5, reason="the coverage table is written for transformers 5.x")


@pytest.fixture(scope="module")
def rows():
    return coverage()


@FIVE
def test_every_installed_model_type_has_an_entry(rows):
    """A type transformers maps that no recipe matches and no refusal names: a new release's new
    types fail here until each is exported, refused in one line or marked not applicable."""
    assert {row.model_type for row in rows} == set(installed_types())
    assert [row.model_type for row in rows if row.status == "missing"] == []


def test_a_new_type_without_an_entry_is_missing(monkeypatch):
    """The check above can fail: a type added to transformers' mapping shows up as missing."""
    real = installed_types()
    monkeypatch.setattr(
        coverage_module, "installed_types", lambda: {**real, "brand_new_lm": {"causal-lm": "BrandNewForCausalLM"}}
    )
    missing = [row for row in coverage() if row.status == "missing"]
    assert [row.model_type for row in missing] == ["brand_new_lm"]
    assert "no entry" in readme_table(missing)


@FIVE
def test_refusals_name_installed_types_no_recipe_exports(rows):
    """No stale refusal (a type transformers no longer has) and none that contradicts a recipe: a
    refused type's name is matched by no built-in recipe, and exported rows have modes and precisions."""
    installed = set(installed_types())
    assert set(REFUSED) - installed == set() and set(NOT_APPLICABLE) - installed == set()
    assert set(REFUSED) & set(NOT_APPLICABLE) == set()
    recipes, types = builtin_recipes(), installed_types()
    for model_type in (*REFUSED, *NOT_APPLICABLE):
        for class_name in types[model_type].values():
            with pytest.raises(InputError):
                match_recipe(model_type, class_name, recipes)
    for row in rows:
        if row.status == "exported":
            assert row.modes and row.precisions["cpu"][0] == "fp32", row
        else:
            assert row.reason and "\n" not in row.reason, row


@FIVE
def test_exported_rows_read_their_spec_and_recipe(rows):
    """Modes come from the spec (ALiBi: bias only; recurrent state or attention sinks: gqa only),
    defaults from the recipe, precisions from the EP table, the multimodal package from the recipe."""
    by_type = {row.model_type: row for row in rows}
    assert by_type["bloom"].modes == ("bias",) and by_type["bloom"].default_mode == "bias"
    assert by_type["lfm2"].modes == ("gqa",) and by_type["gpt_oss"].modes == ("gqa",)
    assert by_type["llama"].modes == ("gqa", "bias", "split") and by_type["llama"].default_mode == "auto"
    assert by_type["llama"].precisions["cuda"][0] == "fp16" and "bf16" in by_type["llama"].precisions["cuda"]
    assert by_type["exaone"].recipe == "exaone" and by_type["solar_open"].recipe == "solar_open"
    assert by_type["qwen2_5_vl"].package == "full multimodal (qwen2_5_vl)"
    assert by_type["gemma3n"].package.startswith("text decoder")


@FIVE
def test_the_readme_table_is_generated_from_the_coverage(rows):
    """Regenerate with `python -m gqa_export.arch.coverage README.md`."""
    found = re.search(re.escape(README_BEGIN) + r"\n(.*?)\n" + re.escape(README_END), README.read_text(), re.S)
    assert found, "README.md lacks the generated coverage table's markers"
    assert found.group(1) == readme_table(rows)


def test_recipes_coverage_prints_the_table():
    result = CliRunner().invoke(app, ["recipes", "--coverage", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["model_type"]: row for row in json.loads(result.stdout)}
    assert rows["llama"]["status"] == "exported" and rows["llama"]["recipe"] == "llama"
    assert rows["reformer"]["status"] == "refused" and "LSH" in rows["reformer"]["reason"]
    assert rows["bert"]["status"] == "not applicable"
    table = CliRunner().invoke(app, ["recipes", "--coverage"])
    assert table.exit_code == 0 and re.search(r"reformer\s+│ refused", table.output), table.output
    # a reason's bracketed text is printed, not read as rich markup (it vanished once)
    assert "reads [the target's" in table.output


@pytest.fixture
def no_weight_read(monkeypatch):
    def read(*args, **kwargs):
        raise AssertionError("a weight was read before the refusal")

    monkeypatch.setattr(WeightStore, "view", read)
    monkeypatch.setattr(WeightStore, "read_slices", read)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(model_type="reformer", architectures=["ReformerModelWithLMHead"]), REFUSED["reformer"]),
        (dict(model_type="bert", architectures=["BertLMHeadModel"]), NOT_APPLICABLE["bert"]),
        # read, not built: its line names the mechanisms (arch/refused_types.py)
        (
            dict(model_type="kolibri1_1", architectures=["Kolibri1_1ForCausalLM"]),
            REFUSED["kolibri1_1"],
        ),
        # a multimodal class whose decoder reads what genai cannot feed (Llama-3.2-Vision's cross-attention):
        # refused by its own type (the classes around an exported decoder: arch/wrapped_decoders.py, --text-only)
        (
            dict(model_type="mllama", architectures=["MllamaForConditionalGeneration"]),
            REFUSED["mllama"],
        ),
        # refused by mechanism (transformers 5.25): a drafter fed the target's KV cache, byte patches
        (dict(model_type="gemma4_assistant", architectures=["Gemma4AssistantForCausalLM"]), "target's own KV cache"),
        (
            dict(model_type="gemma4_unified_assistant", architectures=["Gemma4UnifiedAssistantForCausalLM"]),
            "multi-token-prediction drafter",
        ),
        (dict(model_type="blt", architectures=["BltForCausalLM"]), "entropy patcher"),
        # a prompt prefix inside the model, bidirectional prompt attention, a jieba tokenizer (issue #39)
        (dict(model_type="cpmant", architectures=["CpmAntForCausalLM"]), REFUSED["cpmant"]),
    ],
    ids=[
        "refused",
        "not-applicable",
        "read-not-built",
        "multimodal",
        "gemma4-assistant",
        "gemma4-unified-assistant",
        "blt",
        "cpmant",
    ],
)
def test_a_refused_type_exits_2_in_one_line_before_any_weight_read(
    checkpoints, no_weight_read, tmp_path, changes, says
):
    source = Path(shutil.copytree(checkpoints.get("gqa"), tmp_path / "ckpt"))
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, **changes}))
    result = CliRunner().invoke(app, ["build", str(source), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if changes["model_type"] in line]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out").exists()
