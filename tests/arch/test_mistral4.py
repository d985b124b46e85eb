"""Mistral-4 (gqa_export/arch/latent_families.py MISTRAL4, docs/coverage.md "mistral4"): the registry row
(tests/families.py) holds the package to HF; here each mechanism Mistral-4 adds to DeepSeek-V3's graph is planted
wrong (tests/mutants.py build_planted) and must break that parity. The tiny config (tests/derived_moe_models.py)
steps the query scale every 8 positions (llama_4_scaling_beta 0.5), so the 14-token prompt and its 6 decode steps
see the factors 1, 1 + 0.5 log 2 and 1 + 0.5 log 3, and routes the top 2 of 8 experts within the best of 2 groups.

- the query scale skipped (DeepSeek-V3's graph as it is);
- the scale at pos + 1 (Llama-4's temperature counts positions from 1, Mistral-4 from 0: each step a token early);
- the router's groups ranked by their best probability (DeepSeek-V2's) instead of their two best;
- the chosen experts' probabilities not renormalized (norm_topk_prob ignored).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from families import require_registered
from mutants import build_planted
from reference import parity_error

MISTRAL4 = "mistral4"


def _checkpoint(builds):
    require_registered(MISTRAL4)
    return builds.checkpoint(MISTRAL4)


def _from_position_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph import decoder

    original = decoder.position_query_scale
    monkeypatch.setattr(decoder, "position_query_scale", lambda *a, **k: original(*a, **{"offset": 1, **k}))


def _groups_by_best(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.graph import grouped_routing

    original = grouped_routing._keep_groups
    monkeypatch.setattr(grouped_routing, "_keep_groups", lambda *a, top2: original(*a, top2=False))


def _not_renormalized(monkeypatch: pytest.MonkeyPatch) -> None:
    from gqa_export.model import dims

    original = dims.read_moe
    monkeypatch.setattr(dims, "read_moe", lambda *a: replace(original(*a), normalize=False))


MUTANTS = {
    "query-scale-skipped": {"query_position_scale": False},
    "query-scale-from-position-one": _from_position_one,
    "groups-ranked-by-their-best": _groups_by_best,
    "choice-not-renormalized": _not_renormalized,
}


def test_the_correct_mistral4_package_passes(builds):
    checkpoint = _checkpoint(builds)
    assert parity_error(builds.package(MISTRAL4), checkpoint) < 1e-4  # measured 2.1e-6


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_mistral4_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    checkpoint = _checkpoint(builds)
    package = build_planted(checkpoint, tmp_path / "pkg", monkeypatch, MUTANTS[mutant], spec=MISTRAL4)
    assert parity_error(package, checkpoint) > 1e-2  # measured 0.70, 0.33, 1.20, 0.30 (correct: 2.1e-6)


@pytest.fixture(scope="module")
def small4(tmp_path_factory: pytest.TempPathFactory):
    """Mistral-Small-4's published form: Mistral3ForConditionalGeneration (a Pixtral tower, patch 14, merged 2 x 2)
    whose nested text_config is the row's mistral4 decoder (recipe mistral4_vision)."""
    from multimodal_models import save_multimodal

    require_registered(MISTRAL4)
    return save_multimodal(tmp_path_factory.mktemp("ckpt") / "small4", "mistral4")


def test_mistral3_class_around_mistral4_full_package_matches_hf(small4, tmp_path):
    """The full package (vision.onnx + embedding.onnx + model.onnx, genai type mistral3): one image's features as
    HF's, then the prompt holding them + 6 decode steps (19 positions: the query scale's two steps) as the class;
    onnxruntime-genai's greedy tokens on a text prompt (10 tokens + 24) as HF generate."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from mistral3_full import NEW, hf_generate, hf_image_features
    from reference import genai_media_greedy, hf_model, hf_prompt_then_steps, ort_embedded_greedy

    from gqa_export.pipeline import BuildOptions, build

    build(BuildOptions(str(small4), tmp_path / "full", smoke=False))
    assert json.loads((tmp_path / "full" / "genai_config.json").read_text())["model"]["type"] == "mistral3"
    hf = hf_model(small4)
    pixels = np.random.default_rng(1).uniform(-1, 1, (1, 3, 28, 56)).astype(np.float32)
    sizes = np.array([[28, 56]], np.int64)
    vision = ort.InferenceSession(str(tmp_path / "full" / "vision.onnx"), providers=["CPUExecutionProvider"])
    features = vision.run(None, {"pixel_values": pixels, "image_sizes": sizes})[0]
    np.testing.assert_allclose(features, hf_image_features(hf, pixels, sizes), atol=1e-4, rtol=1e-4)  # 4.8e-6
    prompt = [0, 17, 45, *[hf.config.image_token_id] * len(features), 99, 200, 3, 7, 64, 12, 13, 14]
    got, tokens = ort_embedded_greedy(tmp_path / "full", prompt, {"image_features": features}, 6)
    image = {"pixel_values": torch.from_numpy(pixels), "image_sizes": torch.from_numpy(sizes)}
    np.testing.assert_allclose(got, hf_prompt_then_steps(hf, prompt, tokens, **image), atol=1e-4, rtol=1e-4)  # 1.2e-5
    arrays, greedy = genai_media_greedy(tmp_path / "full", "hello world this is", NEW, ())
    assert greedy == hf_generate(hf, arrays)


def test_mistral3_class_around_mistral4_text_only_matches_hf(small4, tmp_path):
    """--text-only: the decoder alone, read from the nested text_config and the class's language_model tensors."""
    from gqa_export.pipeline import BuildOptions, build

    build(BuildOptions(str(small4), tmp_path / "text", smoke=False, text_only=True))
    assert parity_error(tmp_path / "text", small4) < 1e-4  # measured 6.4e-6
