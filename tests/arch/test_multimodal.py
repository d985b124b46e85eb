"""The text decoders of multimodal checkpoints (`…ForConditionalGeneration`), what only they
have: Gemma-3's bidirectional image runs against HF's own token_type_ids mask and the package's
account of what was exported. The checks every one gets (logits and greedy tokens against the HF
class in every mode, int4 packages) are its row in tests/families.py, run by tests/arch/test_families.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from families import BY_NAME
from multimodal_models import IMAGE_ID
from reference import genai_prompt_then_greedy, hf_model, hf_prompt_then_greedy

IMAGE_PROMPT = [0, 17, 45, *[IMAGE_ID] * 11, 99, 200, 3, 7, IMAGE_ID, IMAGE_ID, 64]  # a run longer than the window


@pytest.mark.parametrize("mode", ["auto", "bias", "split"])
def test_gemma3_image_runs_match_hf_token_type_mask(builds, mode):
    """HF's own mask (token_type_ids: image runs bidirectional on every layer, the window still
    bounding keys on the left) for the prompt, plain causal decoding after it."""
    variant = "gemma3_vision"
    package = builds.package(variant, mode)
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["bidirectional_token_ids"] == [IMAGE_ID]
    if mode == "auto":
        assert manifest["options"]["attention"] == "split"
    hf = hf_model(builds.checkpoint(variant))
    image = (np.asarray(IMAGE_PROMPT) == IMAGE_ID).astype(np.int64)
    import torch

    ref_logits, ref_tokens = hf_prompt_then_greedy(hf, IMAGE_PROMPT, 24, token_type_ids=torch.from_numpy(image[None]))
    causal_logits, _ = hf_prompt_then_greedy(hf, IMAGE_PROMPT, 0)
    assert np.abs(ref_logits[3:] - causal_logits[3:]).max() > 1e-2  # the mask matters
    logits, tokens = genai_prompt_then_greedy(package, IMAGE_PROMPT, 24)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref_tokens


def test_gqa_drops_image_defaults_for_text_only_use(builds):
    manifest = json.loads((builds.package("gemma3_vision", "gqa") / "manifest.json").read_text())
    assert manifest["options"]["attention"] == "gqa" and manifest["options"]["bidirectional_token_ids"] == []
    assert "attend causally" in manifest["options"]["attention_reason"]


@pytest.mark.parametrize(
    ("variant", "prefix"),
    [
        ("gemma3_vision", "language_model.model."),
        ("gemma3_vision_v5_softcap", "model.language_model."),
        ("ministral3_vision", "language_model.model."),
        ("qwen2_5_vl", "model."),
        ("qwen3_vl_v5", "model.language_model."),
    ],
)
def test_package_says_what_was_exported(builds, variant, prefix):
    """The text decoder's genai model type (its registry row), the architecture and the prefix
    exported, the tokenizer, and no vision weight."""
    package = builds.package(variant, "gqa")
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["type"] == BY_NAME[variant].genai_type
    model = json.loads((package / "manifest.json").read_text())["model"]
    assert model["architecture"].endswith("ForConditionalGeneration")
    assert model["exported"].startswith("text decoder only") and f"'{prefix}'" in model["exported"]
    source = builds.checkpoint(variant)
    assert (package / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    assert json.loads((package / "tokenizer_config.json").read_text())["chat_template"]
    assert not any("vision" in name or "visual" in name for name in _initializer_names(package))


def _initializer_names(package) -> list[str]:
    return [t.name for t in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.initializer]
