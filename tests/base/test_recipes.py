"""Recipe loading, schema errors with file:line, and matching by model_type/architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from gqa_export.errors import InputError
from gqa_export.recipes import builtin_recipes, load_recipe, match_recipe

TRAINED = Path(__file__).resolve().parents[1] / "data" / "tiny-trained"

GOOD = """\
name: custom
match:
  model_types: [my_llama]
arch: llama
attention:
  mode: gqa
"""


def test_builtin_llama_recipe():
    recipe = match_recipe("llama", "LlamaForCausalLM", builtin_recipes())
    assert recipe.name == "llama" and recipe.attention.mode == "auto"
    assert recipe.default_precision == {"cpu": "fp32", "cuda": "fp16", "openvino": "fp32", "webgpu": "fp16",
                                        "dml": "fp16", "trt-rtx": "fp16", "qnn": "int4"}  # fmt: skip


def test_user_recipe_defaults(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(GOOD)
    recipe = load_recipe(path)
    assert recipe.genai_model_type == "decoder" and recipe.attention.packed_qkv
    assert match_recipe("my_llama", "Whatever", [recipe]) is recipe


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GOOD.replace("mode: gqa", "mode: gpa"),
            r"r.yaml:6: attention.mode: expected one of gqa, bias, split, auto, got 'gpa'",
        ),
        (GOOD + "atention: {}\n", r"r.yaml:7: unknown key 'atention'"),
        (GOOD.replace("arch: llama\n", ""), r"r.yaml:1: <top>: missing required key 'arch'"),
        (GOOD.replace("[my_llama]", "my_llama"), r"r.yaml:3: match.model_types: expected a list"),
        (GOOD + "precision:\n  cpu: fp64\n", r"r.yaml:8: precision.cpu: expected one of"),
        (GOOD.replace("mode: gqa", "packed_qkv: yes please"), r"r.yaml:6: attention.packed_qkv: expected bool"),
        ("name: [unclosed", r"r.yaml:1: not valid YAML"),
    ],
)
def test_schema_errors_name_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_recipe(path)


def test_config_without_architectures_matches_by_model_type():
    assert match_recipe("llama", None, builtin_recipes()).name == "llama"


@pytest.mark.parametrize(
    ("model_type", "architecture", "start"),
    [
        ("reformer", "ReformerModelWithLMHead", "NAME"),  # no alike name: nothing suggested
        ("my-llama", "MyLlamaForCausalLM", "llama"),  # a renamed fine-tune: the class it ends with
        ("my-qwen", "Qwen3ForCausalLM", "qwen3"),  # a custom model_type with the family's own class
    ],
)
def test_unknown_architecture_is_one_short_line(model_type, architecture, start):
    """No recipe matching is one line naming where the list is and the --recipe path (it listed
    every recipe, ~3,000 characters)."""
    recipes = builtin_recipes()
    with pytest.raises(InputError) as raised:
        match_recipe(model_type, architecture, recipes)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 400, message
    assert f"unsupported architecture {architecture} (model_type '{model_type}')" in message
    assert f"`gqa-export recipes` lists the {len(recipes)}" in message
    assert f"--recipe FILE, e.g. `gqa-export recipes show {start} > my.yaml` with '{model_type}' added" in message


def test_set_overrides_are_validated(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(GOOD)
    recipe = load_recipe(path, ["attention.packed_qkv=false", "attention.bias_op=gqa"])
    assert recipe.attention.packed_qkv is False and recipe.attention.bias_op == "gqa"
    with pytest.raises(InputError, match=r"unknown key 'model'"):  # numerics live in the family's spec
        load_recipe(path, ["model.norm_offset=1"])
    with pytest.raises(InputError, match=r"unknown key 'attention.packd_qkv'"):
        load_recipe(path, ["attention.packd_qkv=false"])
    with pytest.raises(InputError, match="--set expects key=value"):
        load_recipe(path, ["attention.packed_qkv"])


def test_per_ep_overrides(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(GOOD + "overrides:\n  cuda:\n    attention:\n      packed_qkv: false\n")
    recipe = load_recipe(path)
    assert recipe.for_ep("cpu").attention.packed_qkv is True
    assert recipe.for_ep("cuda").attention.packed_qkv is False


def test_family_numerics_live_in_the_spec():
    """Recipes hold policy; what a family computes is its spec (graph/ never reads a recipe)."""
    from gqa_export.arch import SPECS

    assert SPECS["gemma2"].norm_offset == 1.0 and SPECS["gemma2"].config_keys["activation"] == "hidden_activation"
    assert SPECS["nemotron"].norm_offset == 1.0 and SPECS["granite"].embedding_scale == "config"
    assert SPECS["gemma3_vision"].ignore == ("final_softcap", "attn_softcap") and SPECS["gemma3"].ignore == (
        "attn_softcap",
    )
    runs = SPECS["gemma4"].bidirectional
    assert runs is not None and (runs.layers, runs.window) == ("sliding", "bounded")
    assert SPECS["llama"].bidirectional is None and SPECS["llama"].config_keys["activation"] == "hidden_act"


def test_every_builtin_recipe_has_a_spec():
    from gqa_export.arch import SPECS

    recipes = builtin_recipes()
    assert {r.arch for r in recipes} == set(SPECS)  # every recipe has a spec, every spec a recipe
    assert len({r.name for r in recipes}) == len(recipes)


def test_recipes_cli_lists_and_shows():
    import json

    from typer.testing import CliRunner

    from gqa_export.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["recipes", "--json"])
    assert listed.exit_code == 0 and "gemma3" in {r["name"] for r in json.loads(listed.stdout)}
    shown = runner.invoke(app, ["recipes", "show", "gemma2", "--json"])
    data = json.loads(shown.stdout)
    assert data["arch"] == "gemma2" and data["genai_model_type"] == "gemma2" and "model" not in data
    missing = runner.invoke(app, ["recipes", "show", "nope"])
    assert missing.exit_code == 2 and "no recipe named 'nope'" in missing.output
    typo = runner.invoke(app, ["recipes", "show", "lama"])
    assert typo.exit_code == 2 and len(typo.output) < 200, typo.output
    assert "no recipe named 'lama' (did you mean 'llama'?); `gqa-export recipes` lists the" in typo.output


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
def test_what_recipes_show_prints_is_a_valid_recipe(tmp_path, as_json):
    """`gqa-export recipes show NAME > my.yaml && gqa-export build ... --recipe my.yaml`, for every
    built-in recipe: the printed document loads, and resolves to the same recipe."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    runner = CliRunner()
    for recipe in builtin_recipes():
        assert recipe.path.stem == recipe.name, "find_recipe reads a recipe from the file named after it"
        shown = runner.invoke(app, ["recipes", "show", recipe.name, *(["--json"] if as_json else [])])
        assert shown.exit_code == 0, shown.output
        path = tmp_path / f"{recipe.name}.yaml"
        path.write_text(shown.stdout)  # JSON is YAML too
        assert load_recipe(path).as_dict() == recipe.as_dict(), recipe.name


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("attention.packd_qkv=false", "--set attention.packd_qkv=false: unknown recipe key 'attention.packd_qkv'"),
        ("attention.packed_qkv=flase", "--set attention.packed_qkv=flase: expected bool, got 'flase'"),
        ("attention.mode=nope", "--set attention.mode=nope: expected one of gqa, bias, split, auto"),
        ("model.norm_offset=1", "--set model.norm_offset=1: unknown recipe key 'model'"),
        ("attention=1", "--set attention=1: expected a mapping"),
        ("attention.mode.x=1", "--set attention.mode.x=1: 'attention.mode' takes a value, not keys"),
    ],
)
def test_set_is_checked_before_the_fetch_and_named(tmp_path, setting, message):
    """A --set typo is refused naming the flag, before anything is fetched (the Hub id below does
    not exist and the network is never asked)."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    result = CliRunner().invoke(app, ["build", "acme/does-not-exist", "-o", str(tmp_path / "o"), "--set", setting])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "o").exists()


def test_custom_model_type_builds_with_a_recipe(tmp_path):
    """A fine-tune under a model_type transformers does not know, the documented way: the build
    refuses it in one line naming the path, `recipes show llama` edited to match it is passed with
    --recipe, and the config is read with the arch's config class (it failed: "Transformers does
    not recognize this architecture"). Exact against HF's LlamaForCausalLM on the same weights:
    prompt logits and 16 greedy tokens through onnxruntime-genai."""
    import json
    import shutil
    from pathlib import Path

    import numpy as np
    import torch
    import transformers
    from reference import assert_varied, genai_prompt_then_greedy, hf_prompt_then_greedy
    from typer.testing import CliRunner

    from gqa_export.cli import app

    runner = CliRunner()
    checkpoint = Path(shutil.copytree(TRAINED, tmp_path / "my-llama"))
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(model_type="my-llama", architectures=["MyLlamaForCausalLM"])
    (checkpoint / "config.json").write_text(json.dumps(config))
    out = tmp_path / "pkg"

    refused = runner.invoke(app, ["build", str(checkpoint), "-o", str(out), "--no-smoke"])
    assert refused.exit_code == 2 and not out.exists()
    [line] = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert len(line) < 400 and "`gqa-export recipes show llama > my.yaml`" in line, line

    shown = runner.invoke(app, ["recipes", "show", "llama", "--json"])
    recipe = json.loads(shown.stdout)
    recipe.update(name="my-llama", match={"model_types": ["my-llama"], "architectures": ["MyLlamaForCausalLM"]})
    (tmp_path / "my.yaml").write_text(json.dumps(recipe))
    built = runner.invoke(app, ["build", str(checkpoint), "-o", str(out), "--recipe", str(tmp_path / "my.yaml")])
    assert built.exit_code == 0, built.output
    assert "transformers does not know model_type 'my-llama': config.json read as 'llama'" in built.stderr
    assert "You are using a model of type" not in built.output  # transformers' own warning: the note says it
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["model_type"] == "my-llama" and manifest["recipe"]["name"] == "my-llama"

    hf = transformers.LlamaForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    prompt = [0, 57, 211, 38, 402, 19, 75]
    logits, tokens = genai_prompt_then_greedy(out, prompt, 16)
    ref_logits, ref_tokens = hf_prompt_then_greedy(hf, prompt, 16)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens
    assert_varied([tokens])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"arch": "lama"}, "recipe asks for arch 'lama', which has no spec (did you mean 'llama'? each built-in"),
        # a config the arch's class reads, weights that arch does not have: one line
        ({"arch": "gemma2"}, "the checkpoint does not match its config.json (or the architecture spec)"),
    ],
)
def test_custom_model_type_recipe_errors_are_one_line(tmp_path, edit, message):
    import json
    import shutil
    from pathlib import Path

    from typer.testing import CliRunner

    from gqa_export.cli import app

    runner = CliRunner()
    checkpoint = Path(shutil.copytree(TRAINED, tmp_path / "my-llama"))
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "model_type": "my-llama"}))
    recipe = {**json.loads(runner.invoke(app, ["recipes", "show", "llama", "--json"]).stdout), **edit}
    (tmp_path / "my.yaml").write_text(json.dumps(recipe))
    args = ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--recipe", str(tmp_path / "my.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert message in line and len(line) < 400, line
    assert "Traceback" not in result.output and not (tmp_path / "pkg").exists()
