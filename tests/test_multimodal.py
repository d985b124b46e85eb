"""The text decoders of multimodal checkpoints (`…ForConditionalGeneration`) against the HF class
itself: logits (prompt + decode steps), greedy onnxruntime-genai tokens in every attention mode,
Gemma-3's bidirectional image runs against HF's own token_type_ids mask, and the package's
account of what was exported."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from multimodal_models import IMAGE_ID
from reference import (
    assert_varied,
    genai_prompt_then_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    hf_prompt_then_greedy,
    ort_prefill_and_decode,
)
from variants import MULTIMODAL_VARIANTS
from weight_layouts import INT4_MAX_ERROR, relative_errors

from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy, load

# 20 tokens: past Gemma-3's window (8) and Ministral-3's query-scale step (original_max 16)
PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13, 14, 15, 16, 17, 18, 19]
NEW = 40
IMAGE_PROMPT = [0, 17, 45, *[IMAGE_ID] * 11, 99, 200, 3, 7, IMAGE_ID, IMAGE_ID, 64]  # a run longer than the window


@pytest.fixture(scope="module")
def packages(checkpoints, tmp_path_factory):
    made = {}

    def get(variant: str, mode: str):
        if (variant, mode) not in made:
            out = tmp_path_factory.mktemp("multimodal") / f"{variant}-{mode}"
            build(BuildOptions(str(checkpoints.get(variant)), out, smoke=False, attention=mode))
            made[variant, mode] = out
        return made[variant, mode]

    return get


@pytest.mark.parametrize("variant", list(MULTIMODAL_VARIANTS))
def test_text_decoder_logits_match_hf_class(packages, checkpoints, variant):
    """gqa: the prompt and 6 decode steps against the multimodal class fed only input_ids."""
    package = packages(variant, "gqa")
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoints.get(variant)), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0


@pytest.mark.parametrize("mode", ["gqa", "bias", "split"])
@pytest.mark.parametrize("variant", list(MULTIMODAL_VARIANTS))
def test_text_decoder_generates_like_hf(packages, checkpoints, variant, mode):
    package = packages(variant, mode)
    hf = hf_model(checkpoints.get(variant))
    model = load(package, "cpu")
    seen: list[list[int]] = []
    for prompt in ([0], PROMPT):
        got = generate_greedy(package, prompt, NEW, min_new_tokens=NEW, model=model)
        assert got.tokens == hf_generate(hf, prompt, NEW), (mode, prompt)
        seen.append(got.tokens)
    assert_varied(seen)


@pytest.mark.parametrize("mode", ["auto", "bias", "split"])
def test_gemma3_image_runs_match_hf_token_type_mask(packages, checkpoints, mode):
    """HF's own mask (token_type_ids: image runs bidirectional on every layer, the window still
    bounding keys on the left) for the prompt, plain causal decoding after it."""
    variant = "gemma3_vision"
    package = packages(variant, mode)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["bidirectional_token_ids"] == [IMAGE_ID]
    if mode == "auto":
        assert manifest["options"]["attention"] == "split"
    hf = hf_model(checkpoints.get(variant))
    image = (np.asarray(IMAGE_PROMPT) == IMAGE_ID).astype(np.int64)
    import torch

    ref_logits, ref_tokens = hf_prompt_then_greedy(hf, IMAGE_PROMPT, 24, token_type_ids=torch.from_numpy(image[None]))
    causal_logits, _ = hf_prompt_then_greedy(hf, IMAGE_PROMPT, 0)
    assert np.abs(ref_logits[3:] - causal_logits[3:]).max() > 1e-2  # the mask matters
    logits, tokens = genai_prompt_then_greedy(package, IMAGE_PROMPT, 24)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


def test_gqa_drops_image_defaults_for_text_only_use(packages):
    manifest = json.loads((packages("gemma3_vision", "gqa") / "manifest.json").read_text())
    assert manifest["options"]["attention"] == "gqa" and manifest["options"]["bidirectional_token_ids"] == []
    assert "attend causally" in manifest["options"]["attention_reason"]


@pytest.mark.parametrize(
    ("variant", "genai_type", "prefix"),
    [
        ("gemma3_vision", "gemma3_text", "language_model.model."),
        ("gemma3_vision_v5_softcap", "gemma3_text", "model.language_model."),
        ("ministral3_vision", "mistral", "language_model.model."),
        ("qwen2_5_vl", "qwen2", "model."),
        ("qwen3_vl_v5", "qwen3", "model.language_model."),
    ],
)
def test_package_says_what_was_exported(packages, checkpoints, variant, genai_type, prefix):
    package = packages(variant, "gqa")
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["type"] == genai_type
    model = json.loads((package / "manifest.json").read_text())["model"]
    assert model["architecture"].endswith("ForConditionalGeneration")
    assert model["exported"].startswith("text decoder only") and f"'{prefix}'" in model["exported"]
    source = checkpoints.get(variant)
    assert (package / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    assert json.loads((package / "tokenizer_config.json").read_text())["chat_template"]
    assert not any("vision" in name or "visual" in name for name in _initializer_names(package))


def _initializer_names(package) -> list[str]:
    return [t.name for t in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.initializer]


@pytest.mark.parametrize("variant", ["gemma3_vision", "ministral3_vision", "qwen3_vl_v5"])
def test_int4_text_decoder_generates(checkpoints, tmp_path, variant):
    result = build(BuildOptions(str(checkpoints.get(variant)), tmp_path / "int4", precision="int4"))
    assert result.smoke is not None and result.smoke.tokens
    for graph in (tmp_path / "int4").glob("*.onnx"):  # split (gemma3_vision's auto) has two graphs
        ops = {n.op_type for n in onnx.load(str(graph), load_external_data=False).graph.node}
        assert "MatMulNBits" in ops and "MatMul" not in ops
        # each weight dequantized independently against the checkpoint's (tests/weight_layouts.py)
        errors = relative_errors(tmp_path / "int4", checkpoints.get(variant), graph.name)
        assert errors and max(errors.values()) < INT4_MAX_ERROR, errors
