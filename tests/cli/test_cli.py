"""The CLI end to end: --json output, package contents, and one clear line + exit 2 for bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_runner import invoke

from gqa_export import __version__


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name]


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output


def test_build_json_package_and_manifest(checkpoints, tmp_path):
    out = tmp_path / "pkg"
    result = invoke("build", checkpoints.get("gqa"), "-o", out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["attention"] == "gqa" and report["precision"] == "fp32" and report["ep"] == "cpu"
    assert report["smoke"]["new_tokens"] == 16 and report["smoke"]["tokens_per_s"] > 0
    expected = {
        "model.onnx",
        "model.onnx.data",
        "genai_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "manifest.json",
    }
    assert expected <= set(report["files"]) and report["total_bytes"] == sum(report["files"].values())
    manifest = json.loads((out / "manifest.json").read_text())
    # no local path in the package: the folder's name and its config's hash name the source
    assert manifest["source"]["id"] == "gqa" and manifest["source"]["local"] is True
    assert (
        manifest["source"]["config_sha256"]
        == hashlib.sha256((checkpoints.get("gqa") / "config.json").read_bytes()).hexdigest()
    )
    assert manifest["recipe"]["builtin"] is True and "path" not in manifest["recipe"]
    assert manifest["recipe"]["name"] == "llama" and manifest["options"]["precision"] == "fp32"
    assert {"onnx", "onnxruntime-genai-cuda", "transformers"} <= set(manifest["dependencies"]) or {
        "onnx",
        "onnxruntime-genai",
        "transformers",
    } <= set(manifest["dependencies"])
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == entry["sha256"]
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert "<|start_header_id|>" in tokenizer_config["chat_template"]
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert leftovers(tmp_path) == []


def test_existing_output_is_refused_then_overwritten(checkpoints, tmp_path):
    """--overwrite replaces an empty folder or its own package, never a folder holding other files."""
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = invoke("build", checkpoints.get("gqa"), "-o", out, "--no-smoke")
    assert result.exit_code == 2
    assert "already exists; pass --overwrite" in result.output
    result = invoke("build", checkpoints.get("gqa"), "-o", out, "--no-smoke", "--overwrite", "-q")
    assert result.exit_code == 2 and "keep.txt" in result.output
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    for _ in range(2):  # an empty folder, then the package written there
        result = invoke("build", checkpoints.get("gqa"), "-o", out, "--no-smoke", "--overwrite", "-q")
        assert result.exit_code == 0, result.output
        assert (out / "model.onnx").exists()
    assert leftovers(tmp_path) == []


def _broken_copy(src: Path, dest: Path, edit) -> Path:
    folder = shutil.copytree(src, dest)
    edit(folder)
    return folder


def _set_config(**values):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config.update(values)
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def _truncate_shard(folder: Path) -> None:
    shard = folder / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:1000])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            # a type transformers maps but gqa-export refuses by name: the coverage table's one line
            _set_config(model_type="reformer", architectures=["ReformerModelWithLMHead"]),
            r"model_type 'reformer' is not exported: Reformer's LSH .*no onnxruntime op",
        ),
        (
            _set_config(model_type="brand_new", architectures=["BrandNewForCausalLM"]),
            r"unsupported architecture BrandNewForCausalLM \(model_type 'brand_new'\): no built-in recipe matches "
            r"it \(`gqa-export recipes` lists the \d+\); .*--recipe FILE",
        ),
        (_set_config(hidden_act="gelu"), "activation 'gelu' is not supported for llama"),
        (
            _set_config(rope_scaling={"rope_type": "axial", "factor": 4.0}),
            "rope type 'axial' is not supported",
        ),
        (_truncate_shard, "weight shard model.safetensors is corrupt or truncated"),
        (lambda f: (f / "model.safetensors").unlink(), "no .safetensors weights in"),
        (lambda f: (f / "config.json").write_text("{not json"), "config.json is not valid JSON"),
    ],
)
def test_bad_checkpoints_exit_2_with_one_line(checkpoints, tmp_path, edit, message):
    folder = _broken_copy(checkpoints.get("gqa"), tmp_path / "ckpt", edit)
    out = tmp_path / "pkg"
    result = invoke("build", folder, "-o", out)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert __import__("re").search(message, result.output.replace("\n", " ")), result.output
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ep", "cpu", "--precision", "bf16"], "--precision bf16 cannot run with --ep cpu"),
        (["--ep", "cuda", "--precision", "fp32"], "--precision fp32 cannot run with --ep cuda"),
        (["--ep", "tpu"], "'tpu' is not one of"),
        (["--precision", "fp8"], "'fp8' is not one of"),
        (["--max-length", "100000"], "--max-length must be between 2 and the model's context length 256"),
    ],
)
def test_bad_options_exit_2(checkpoints, tmp_path, args, message):
    out = tmp_path / "pkg"
    result = invoke("build", checkpoints.get("gqa"), "-o", out, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output.replace("\n", " ")
    assert not out.exists()


def test_missing_local_folder(tmp_path):
    result = invoke("build", tmp_path / "nope", "-o", tmp_path / "pkg")
    assert result.exit_code == 2 and "does not exist" in result.output


def test_smoke_failure_exits_1_and_leaves_nothing(checkpoints, tmp_path):
    def break_tokenizer(folder: Path) -> None:
        (folder / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": 7}}')

    folder = _broken_copy(checkpoints.get("gqa"), tmp_path / "ckpt", break_tokenizer)
    out = tmp_path / "pkg"
    result = invoke("build", folder, "-o", out)
    assert result.exit_code == 1, result.output
    assert "smoke run on cpu failed" in result.output
    assert not out.exists() and leftovers(tmp_path) == []


def test_interrupted_build_leaves_nothing(checkpoints, tmp_path, monkeypatch):
    import gqa_export.pipeline as pipeline
    import gqa_export.stages.package as package_stage

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(package_stage, "write_json", interrupted)
    out = tmp_path / "pkg"
    with pytest.raises(KeyboardInterrupt):
        pipeline.build(pipeline.BuildOptions(str(checkpoints.get("gqa")), out, smoke=False))
    assert not out.exists() and leftovers(tmp_path) == []


def test_user_recipe_for_custom_model_type(checkpoints, tmp_path):
    folder = _broken_copy(
        checkpoints.get("gqa"), tmp_path / "ckpt", _set_config(model_type="llama", architectures=["MyTunedLlama"])
    )
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("name: mine\nmatch:\n  model_types: [llama]\narch: llama\ngenai_model_type: decoder\n")
    assert invoke("build", folder, "-o", tmp_path / "a", "--no-smoke").exit_code == 2
    result = invoke("build", folder, "-o", tmp_path / "b", "--recipe", recipe, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["recipe"] == "mine"
    assert json.loads((tmp_path / "b" / "genai_config.json").read_text())["model"]["type"] == "decoder"


# --set -> (a tensor the package holds, a tensor it must not hold, manifest keys, the value recorded)
PROJECTION_LAYOUTS = {
    "attention.packed_qkv=false": (
        "model.layers.0.self_attn.q_proj.weight", "qkv_proj", ("attention", "packed_qkv"), False
    ),
    "mlp.packed_gate_up=false": (
        "model.layers.0.mlp.gate_proj.weight", "gate_up_proj", ("mlp", "packed_gate_up"), False
    ),
    # packed on CPU, whose EP record unpacks gate/up by default: the recipe's explicit value wins
    "mlp.packed_gate_up=true": ("model.layers.0.mlp.gate_up_proj.weight", "gate_proj", ("mlp", "packed_gate_up"), True),
}  # fmt: skip


@pytest.mark.parametrize("setting", PROJECTION_LAYOUTS)
def test_set_projection_layouts_stay_exact(checkpoints, tmp_path, setting):
    """q/k/v (or gate/up) as separate MatMuls, or gate/up packed where the EP unpacks it: the same
    logits as HF, prompt and decode."""
    import numpy as np
    import onnx
    from reference import hf_logits, hf_model, ort_prefill_and_decode

    apart, packed, (section, key), recorded = PROJECTION_LAYOUTS[setting]
    out = tmp_path / "pkg"
    result = invoke("build", checkpoints.get("qwen3_qk_norm"), "-o", out, "--no-smoke", "--set", setting)
    assert result.exit_code == 0, result.output
    names = {t.name for t in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.initializer}
    assert apart in names and not any(packed in n for n in names)
    tokens, got = ort_prefill_and_decode(out, [0, 5, 9, 13, 17], steps=3)
    np.testing.assert_allclose(
        got, hf_logits(hf_model(checkpoints.get("qwen3_qk_norm")), tokens, 5), atol=1e-4, rtol=1e-4
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recipe"][section][key] is recorded


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ("attention.mode=gqa", "attention.bidirectional_token_ids=[300]"),
            "attention gqa cannot express bidirectional token blocks",
        ),
        (("attention.modee=gqa",), "unknown recipe key 'attention.modee'"),
    ],
)
def test_recipe_asking_for_missing_feature_fails_before_work(checkpoints, tmp_path, settings, message):
    out = tmp_path / "pkg"
    result = invoke("build", checkpoints.get("gqa"), "-o", out, *[a for s in settings for a in ("--set", s)])
    assert result.exit_code == 2 and message in result.output
    assert not out.exists() and leftovers(tmp_path) == []


def test_head_dim_gqa_cannot_take_falls_back_to_bias(checkpoints, tmp_path):
    """head_dim 20: GQA needs multiples of 8. auto exports bias (same shared buffer), exact; an
    explicit --attention gqa is one line, exit 2."""
    from reference import hf_generate, hf_model

    from gqa_export.runtime.run import generate_greedy

    folder = checkpoints.get("llama_head_dim_20", head_dim=20)
    refused = invoke("build", folder, "-o", tmp_path / "gqa", "--attention", "gqa", "--no-smoke")
    assert refused.exit_code == 2 and "head_dim 20 is not a multiple of 8" in refused.output
    assert not (tmp_path / "gqa").exists()
    ok = invoke("build", folder, "-o", tmp_path / "auto", "--no-smoke", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["attention"] == "bias"
    prompt = [0, 17, 45, 99, 200, 3, 7]
    assert generate_greedy(tmp_path / "auto", prompt, 24, min_new_tokens=24).tokens == hf_generate(
        hf_model(folder), prompt, 24
    )


def test_flags_without_effect_are_said(checkpoints, tmp_path):
    """#34 item 12: --text-only on a text checkpoint and --dequantize on one without bitsandbytes
    weights change nothing; each says so (stderr and --json's notes) instead of passing unsaid.
    (A multimodal checkpoint's --text-only: tests/package/multimodal/test_multimodal_commands.py, no such note.)"""
    model = checkpoints.get("gqa")
    result = invoke("build", model, "-o", tmp_path / "pkg", "--text-only", "--dequantize", "--no-smoke", "--json")
    assert result.exit_code == 0, result.output
    said = [line.removeprefix("note: ") for line in result.stderr.splitlines() if "has no effect" in line]
    assert said == [
        f"--text-only has no effect: {model} exports as a text package anyway",
        f"--dequantize has no effect: {model} holds no bitsandbytes weights, the only ones it reads",
    ]
    assert [n for n in json.loads(result.stdout)["notes"] if "has no effect" in n] == said
    plain = invoke("build", model, "-o", tmp_path / "plain", "--no-smoke", "--json")
    assert not any("no effect" in n for n in json.loads(plain.stdout)["notes"])
    assert (tmp_path / "pkg" / "model.onnx.data").read_bytes() == (tmp_path / "plain" / "model.onnx.data").read_bytes()
