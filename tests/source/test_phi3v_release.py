"""Phi-3-vision / Phi-3.5-vision as released (model_type phi3_v, Phi3VForCausalLM, remote code transformers does not
have; source/release_layouts.py, recipes/phi3_v.yaml): --text-only exports its Phi-3 decoder, held against
transformers' Phi3ForCausalLM on the same weights (tests/phi3v_models.py); its LongRoPE config spelled as the release
spells it (`su`, `longrope`) is read; without --text-only the build refuses in one line (the phi3v towers are not
built yet)."""

from __future__ import annotations

import json

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
    and original positions; the image settings and remote-code keys are set aside."""
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
    assert not hasattr(read, "embd_layer") and not hasattr(read, "img_processor")


def test_without_text_only_one_line_exit_2(built, tmp_path):
    """The phi3v package's CLIP tower and projector are not built yet: one line, exit 2, no package."""
    _, release, _ = built
    result = CliRunner().invoke(app, ["build", str(release), "-o", str(tmp_path / "out"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (
        "Phi3VForCausalLM's CLIP vision tower and HD-crop projector are not built yet (onnxruntime-genai runs them "
        "as its phi3v package); pass --text-only to export its phi3 text decoder alone"
    ) in said
    assert not (tmp_path / "out").exists()
