"""Phi-3-vision's full phi3v package (recipes/phi3_v.yaml, graph/encoders/clip_hd.py, docs/multimodal.md §21): a tiny
release (tests/phi3v_models.py) built by default; genai's processor on real images, its vision model's features =
the remote code's (CLIPVisionModel + its HD transform, written in torch), and greedy genai tokens = Phi3ForCausalLM's
on the same ids with those features in the placeholders' rows (HF's logits within 1e-4 of the package's too)."""

from __future__ import annotations

import numpy as np
import pytest
from phi3v_models import hd_features, release_tower, save_phi3v_twins
from reference import OrtStepper, assert_varied, genai_media_greedy, hf_embeds_then_greedy, hf_model

from gqa_export.pipeline import BuildOptions, build

NEW = 12
KEYS = ("pixel_values", "image_sizes")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("phi3v_package")
    twin, release = save_phi3v_twins(root)
    build(BuildOptions(str(release), root / "pkg", smoke=False))
    rng = np.random.default_rng(0)
    images = {}
    for name, (w, h) in {"wide": (500, 300), "tall": (200, 420)}.items():
        images[name] = root / f"{name}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(images[name])
    images["red"] = root / "red.png"
    Image.new("RGB", (336, 336), (255, 0, 0)).save(images["red"])
    return twin, release, root / "pkg", images


def _hf(twin, release, arrays):
    """Phi3ForCausalLM on the twin's weights with the remote code's image rows at the placeholders (-N):
    (prompt logits, greedy tokens through its cache, EOS suppressed)."""
    import torch

    clip, extra = release_tower(release)
    features = hd_features(clip, extra, arrays["pixel_values"], arrays["image_sizes"])
    model, ids = hf_model(twin), torch.from_numpy(arrays["input_ids"].astype(np.int64))
    with torch.no_grad():
        embeds = model.model.embed_tokens(ids.clamp_min(0))
        embeds[ids < 0] = features
    prompt_logits, tokens = hf_embeds_then_greedy(model, embeds, NEW)
    return features.numpy(), prompt_logits, tokens


def _ort(package, arrays):
    """vision.onnx on genai's pixels, embedding.onnx, model.onnx on the embeds: (features, prompt logits)."""
    import onnxruntime as ort

    vision = ort.InferenceSession(str(package / "vision.onnx"), providers=["CPUExecutionProvider"])
    features = vision.run(None, {k: arrays[k] for k in KEYS})[0]
    embedding = ort.InferenceSession(str(package / "embedding.onnx"), providers=["CPUExecutionProvider"])
    ids = arrays["input_ids"].astype(np.int64)
    embeds = embedding.run(None, {"input_ids": ids, "image_features": features})[0]
    stepper = OrtStepper(package, ids.shape[1] + 4)
    return features, stepper.step(ids[0].tolist(), {"inputs_embeds": embeds})


@pytest.fixture(scope="module")
def two_images(built):
    """genai's processor and greedy tokens on two images (a wide and a tall one, 15 and 12 crops; the prompt 4.7k
    tokens), and HF's features, prompt logits and greedy tokens on genai's ids and pixels."""
    twin, release, package, images = built
    prompt, names = "Compare <|image_1|> and <|image_2|> now.", ["wide", "tall"]
    arrays, tokens = genai_media_greedy(package, prompt, NEW, KEYS, [images[n] for n in names])
    sizes = arrays["image_sizes"] // 336
    counts = [int((h * w + 1) * 144 + 1 + (h + 1) * 12) for h, w in sizes]
    assert [int((arrays["input_ids"] == -(i + 1)).sum()) for i in range(len(names))] == counts
    return arrays, tokens, _hf(twin, release, arrays)


def test_genai_phi3v_matches_the_remote_code(built, two_images):
    """genai's processor + vision + embedding + decoder: features and prompt logits within 1e-4 of HF's (measured
    6.7e-6 and 7.7e-5), greedy tokens equal and varied."""
    arrays, tokens, (features, prompt_logits, ref) = two_images
    got_features, got_logits = _ort(built[2], arrays)
    assert np.abs(got_features - features).max() < 1e-4
    np.testing.assert_allclose(got_logits, prompt_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref
    assert_varied([tokens])


def test_placeholders_of_image_1_left_as_tokens_fail(built, two_images, tmp_path, monkeypatch):
    """Mutant: the embedding model taking ids below -1 only as placeholders (image 1's -1 embedded as id 0)."""
    from gqa_export.graph import builder

    const = builder.GraphBuilder.const

    def shifted(self, array, name, dtype=None):
        moved = name == "image_token_id" and np.asarray(array).item() == 0
        return const(self, -1 if moved else array, name, dtype)

    monkeypatch.setattr(builder.GraphBuilder, "const", shifted)
    build(BuildOptions(str(built[1]), tmp_path / "pkg", smoke=False))
    monkeypatch.undo()
    arrays, _, (_, prompt_logits, _) = two_images
    _, got_logits = _ort(tmp_path / "pkg", arrays)
    assert np.abs(got_logits - prompt_logits).max() > 1e-2


def test_processor_decodes_rgb(built):
    """A pure red image: channel 0 of the global view is red's normalised value, channel 2 blue's zero's."""
    _, _, package, images = built
    from reference import genai_media_inputs

    _, arrays = genai_media_inputs(package, "<|image_1|>", KEYS, [images["red"]])
    glb = arrays["pixel_values"][0, 0]
    assert arrays["image_sizes"].tolist() == [[1344, 1344]]  # a square image: 4 x 4 crops
    np.testing.assert_allclose(glb[:, 100:200, 100:200].mean(axis=(1, 2)),
                               [(1 - 0.48145466) / 0.26862954, -0.4578275 / 0.26130258, -0.40821073 / 0.27577711],
                               atol=1e-3)  # fmt: skip
