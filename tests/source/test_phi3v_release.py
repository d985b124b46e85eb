"""Phi-3-vision / Phi-3.5-vision as released (model_type phi3_v, Phi3VForCausalLM, remote code transformers does not
have; source/release_layouts.py, recipes/phi3_v.yaml): --text-only exports its Phi-3 decoder, held against
transformers' Phi3ForCausalLM on the same weights (tests/phi3v_models.py); its LongRoPE config spelled as the release
spells it (`su`, `longrope`) is read; image settings the phi3v package cannot run are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from phi3v_models import ORIGINAL_MAX, save_phi3v_twins
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generates_of,
    hf_logits,
    hf_model,
    ort_prefill_and_decode,
)
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

PROMPT = [0, 17, 45, 300, 99, 200, 301, 3, 7, 11, 12, 13]  # within the 32 original positions: the short factors
LONG_PROMPT = [(11 * i + 5) % 380 for i in range(40)]  # past them from the first step: the long factors
NEW = 16


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("phi3v")
    twin, release = save_phi3v_twins(root)
    build(BuildOptions(str(release), root / "pkg", smoke=False, text_only=True))
    return twin, release, root / "pkg"


def _error(package, twin, prompt=PROMPT, steps: int = 4) -> float:
    tokens, got = ort_prefill_and_decode(package, prompt, steps=steps)
    return float(np.abs(got - hf_logits(hf_model(twin), tokens, len(prompt))).max())


def test_text_only_decoder_matches_phi3(built):
    """ORT logits = Phi3ForCausalLM's on the release's decoder weights (12-token prompt + 4 decode steps, short
    factors; 40-token prompt + 4 steps, long factors); greedy genai tokens past the original positions = HF generate,
    and not one repeated id. The manifest records the release's type and the phi3_v recipe."""
    twin, _, package = built
    assert max(_error(package, twin), _error(package, twin, LONG_PROMPT)) < 1e-4
    _, got = genai_prompt_then_greedy(package, LONG_PROMPT, NEW)
    want = hf_generates_of(twin, [LONG_PROMPT], NEW)[0]
    assert got == want
    assert_varied([got])
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["model"]["model_type"] == "phi3_v" and manifest["recipe"]["name"] == "phi3_v"


def test_release_rope_scaling_without_its_factors_fails_the_bound(built, tmp_path, monkeypatch):
    """Mutant: the release's `su` rope_scaling dropped in the config conversion (plain RoPE, no attention scale)
    fails the bound."""
    from gqa_export.source import checkpoint

    twin, release, _ = built
    convert = checkpoint.converted_config
    monkeypatch.setattr(checkpoint, "converted_config", lambda raw: {**convert(raw), "rope_scaling": None})
    build(BuildOptions(str(release), tmp_path / "plain", smoke=False, text_only=True))
    assert _error(tmp_path / "plain", twin, steps=0) > 1e-2


@pytest.mark.parametrize("rope_type", ["su", "longrope"])
def test_release_config_reads_as_phi3(built, tmp_path, rope_type):
    """Phi-3-vision's `su` and Phi-3.5-vision's `longrope` read as Phi3Config's longrope with the release's tables
    and original positions; the image settings become the tower's vision_config, the remote-code keys are dropped."""
    from gqa_export.source.checkpoint import read_configs

    twin, release, _ = built
    config = json.loads((release / "config.json").read_text())
    config["rope_scaling"]["type"] = rope_type
    (tmp_path / "config.json").write_text(json.dumps(config))
    read, _ = read_configs(tmp_path)
    reference, _ = read_configs(twin)
    assert type(read).__name__ == "Phi3Config" and read.model_type == "phi3_v"
    read_as = {k: v for k, v in read.rope_parameters.items() if k != "type"}  # Phi3Config keeps the release's too
    assert read_as == reference.rope_parameters and read_as["rope_type"] == "longrope"
    assert read.original_max_position_embeddings == ORIGINAL_MAX
    assert not hasattr(read, "embd_layer") and not hasattr(read, "img_processor")  # joined as the tower's settings
    release_config = json.loads((release / "config.json").read_text())
    assert read.vision_config == {**release_config["embd_layer"], **release_config["img_processor"]}


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        (
            "hd_transform_order",
            "glb_only",
            "Phi-3-vision hd_transform_order glb_only / type_feature patch: use --text-only",
        ),
        ("use_hd_transform", False, "only the HD transform with learned separators and an MLP projection is exported"),
    ],
)
def test_image_settings_the_package_cannot_run_exit_2(built, tmp_path, key, value, said):
    """Without --text-only the phi3v package is built (tests/package/multimodal/test_phi3v_package.py); image
    settings its vision graph does not compute are refused in one line, exit 2, before any graph is written."""
    import shutil

    _, release, _ = built
    changed = Path(shutil.copytree(release, tmp_path / "release"))
    config = json.loads((changed / "config.json").read_text())
    config["embd_layer"][key] = value
    (changed / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["build", str(changed), "-o", str(tmp_path / "out"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_embedding_stored_under_the_image_embedders_name_reads_as_the_decoders(built, tmp_path):
    """The remote code shares the decoder's table with its image embedder (`vision_embed_tokens.wte`): a release
    that keeps only that name of the shared tensor builds the same decoder, byte for byte."""
    import shutil

    from safetensors.numpy import load_file, save_file

    _, release, package = built
    renamed = tmp_path / "wte"
    shutil.copytree(release, renamed)
    for file in renamed.glob("*.safetensors"):
        tensors = load_file(file)
        if "model.embed_tokens.weight" in tensors:
            tensors["model.vision_embed_tokens.wte.weight"] = tensors.pop("model.embed_tokens.weight")
            save_file(tensors, file, metadata={"format": "pt"})
    index = renamed / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"]["model.vision_embed_tokens.wte.weight"] = data["weight_map"].pop("model.embed_tokens.weight")
        index.write_text(json.dumps(data))
    build(BuildOptions(str(renamed), tmp_path / "pkg", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "pkg" / name).read_bytes() == (package / name).read_bytes(), name
