"""Gemma-4 full packages (docs/multimodal.md §13): a tiny Gemma4ForConditionalGeneration (tests/
gemma4_models.py form "full": patch 4, 3 x 3 pooling, 70 soft tokens at most, no audio) exported
as vision.onnx (axial-rotary ViT, position pooling, projector) + embedding.onnx + the gemma4
decoder (inputs_embeds and input_ids), against the HF class: the vision features (and mutants of
the tower), the decoder's logits, genai's processor + greedy generation = HF generate. The
package files, `run --image` and the refusals are tests/package/multimodal/test_multimodal_gemma4_commands.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gemma4_full import (
    IMAGE_PROMPT,
    features,
    genai_generate,
    hf_generate,
    hf_pixels,
    padded,
    vision_error,
)
from gemma4_models import save_gemma4
from reference import hf_model, hf_prompt_then_steps, ort_embedded_greedy

from gqa_export.graph.encoders import axial_vit, clipped_linear
from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")


# short names for the session fixtures of tests/conftest.py
@pytest.fixture(scope="module")
def checkpoint(gemma4_full_checkpoint: Path) -> Path:
    return gemma4_full_checkpoint


@pytest.fixture(scope="module")
def package(gemma4_full_package: Path) -> Path:
    return gemma4_full_package


@pytest.fixture(scope="module")
def images(gemma4_png_images: dict[str, Path]) -> dict[str, Path]:
    return gemma4_png_images


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


def test_vision_matches_hf_image_features(checkpoint, hf, images):
    assert vision_error(checkpoint, hf, images) < 1e-4


def _mutant_rotary(orig):
    return lambda b, px, py, dims, dtype: orig(b, py, px, dims, dtype)  # h and w positions swapped


def _mutant_pool(orig):
    return lambda b, x, px, py, dims, params: orig(b, x, py, px, dims, params)  # blocks numbered transposed


def _mutant_project(orig):
    def project(b, x, dims, params):  # the projector's RMSNorm dropped
        name = f"{dims.projector}embed_vision.embedding_projection.weight"
        return b.op("MatMul", x, b.initializer(name, params.matmul_weight([name])))

    return project


@pytest.mark.parametrize(
    ("name", "mutate"), [("_axial_rotary", _mutant_rotary), ("_pool", _mutant_pool), ("_project", _mutant_project)]
)
def test_vision_mutants_fail(checkpoint, hf, images, monkeypatch, name, mutate):
    monkeypatch.setattr(axial_vit, name, mutate(getattr(axial_vit, name)))
    assert vision_error(checkpoint, hf, images) > 1e-2


@pytest.mark.parametrize(
    ("prompt", "names"),
    [
        ("<|image|>Describe it", ["exact"]),
        ("Describe it", []),  # the same package without an image = HF text-only
        ("<|image|> and <|image|> compare", ["exact", "exact"]),
    ],
)
def test_genai_greedy_equals_hf_generate(package, hf, images, prompt, names):
    """genai's processor + greedy = HF generate on HF's own pixels (images that need no resize:
    the pixels agree within 1e-7) and on the same ids."""
    files = [images[n] for n in names]
    ids, extra, tokens = genai_generate(package, prompt, files)
    assert len(set(tokens)) > 3
    if files:
        pixels = hf_pixels(files)
        keep = (pixels["image_position_ids"] != -1).all(-1).numpy()
        np.testing.assert_allclose(extra["pixel_values"], pixels["pixel_values"].numpy()[keep].reshape(
            extra["pixel_values"].shape), atol=1e-6)  # fmt: skip
        assert (ids == 7).sum() == sum(k.sum() // 9 for k in keep)
    assert tokens == hf_generate(hf, ids, hf_pixels(files) if files else {})


@pytest.mark.parametrize("count", [1, 2])
def test_genai_resized_images_equal_hf_on_genai_pixels(package, hf, images, count):
    """A resized image: genai's bicubic differs from PIL's by about 1/255 (pinned), so HF is fed
    genai's own patches (padded as HF pads them) and generates the same tokens."""
    files = [images["resized"]] * count
    ids, extra, tokens = genai_generate(package, " and ".join(["<|image|>"] * count) + " what", files)
    reference = hf_pixels(files)
    keep = (reference["image_position_ids"][0] != -1).all(-1).numpy()
    drift = np.abs(extra["pixel_values"][0] - reference["pixel_values"][0].numpy()[keep]).max()
    assert 1e-3 < drift < 0.005  # genai's bicubic rounding
    assert tokens == hf_generate(hf, ids, padded(extra["pixel_values"], extra["pixel_position_ids"]))


def _ort_logits(package: Path, prompt: list[int], features: np.ndarray | None, steps: int):
    """embedding.onnx then model.onnx as genai steps them: features on the prompt, 0 rows after."""
    rows = {} if features is None else {"image_features": features}
    return ort_embedded_greedy(package, prompt, rows, steps)


def _hf_logits(hf, prompt: list[int], pixels: dict[str, Any], tokens: list[int]) -> np.ndarray:
    import torch

    extra = {**pixels, "mm_token_type_ids": (torch.tensor([prompt]) == 7).long()} if pixels else {}
    return hf_prompt_then_steps(hf, prompt, tokens, **extra)


@pytest.mark.parametrize("case", ["image", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, images, case):
    """Prompt + 6 decode steps within 1e-4 of the HF class: the image's features, the image run
    bidirectional on sliding layers (from input_ids), per-layer embeddings of placeholders as pad."""
    pixels = hf_pixels([images["exact"]]) if case == "image" else {}
    prompt = {"image": IMAGE_PROMPT, "text": [0, 17, 45, 99, 200, 3, 64, 12], "one_token": [0]}[case]
    got, tokens = _ort_logits(package, prompt, features(package, pixels) if pixels else None, steps=6)
    np.testing.assert_allclose(got, _hf_logits(hf, prompt, pixels, tokens), atol=1e-4, rtol=1e-4)


def test_mutant_per_layer_placeholders_as_ids_fail(checkpoint, package, hf, images, tmp_path, monkeypatch):
    """The decoder's per-layer embeddings reading the image placeholders' own ids (HF reads
    pad_token_id there): the image prompt's logits leave the bound."""
    from gqa_export.graph import input_embedding

    monkeypatch.setattr(input_embedding, "placeholders_as_pad", lambda b, ids, dims: ids)
    mutant = tmp_path / "mutant"
    build(BuildOptions(str(checkpoint), mutant, smoke=False))
    pixels = hf_pixels([images["exact"]])
    got, tokens = _ort_logits(mutant, IMAGE_PROMPT, features(package, pixels), steps=0)
    assert np.abs(got - _hf_logits(hf, IMAGE_PROMPT, pixels, tokens)).max() > 1e-2


def test_placeholders_without_a_feature_row_embed_as_pad(package):
    """After the prompt genai passes 0 feature rows: a generated image (or audio) placeholder id
    embeds as pad_token_id (5), as HF's Gemma4Model does; with rows the k-th image one takes row k."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(package / "embedding.onnx"))
    table = next(
        onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("embed_tokens.weight")
    )
    session = ort.InferenceSession(str(package / "embedding.onnx"))
    ids = np.array([[7, 17, 302, 7]], np.int64)
    got = session.run(None, {"input_ids": ids, "image_features": np.zeros((0, 64), np.float32)})[0][0]
    np.testing.assert_allclose(got, table[[5, 17, 5, 5]] * np.float32(8.0), atol=1e-6)
    rows = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    got = session.run(None, {"input_ids": ids, "image_features": rows})[0][0]
    np.testing.assert_allclose(got[[0, 3]], np.stack([rows[0], table[5] * np.float32(8.0)]), atol=1e-6)


def test_clipped_linears_match_hf(tmp_path, images, monkeypatch):
    """use_clipped_linears: every tower projection clamped by its stored bounds (input ±0.8,
    output ±0.1 here) within 1e-4 of HF; the same graph without the clamps fails."""
    checkpoint = save_gemma4(tmp_path / "ckpt", "full", clipped_linears=True)
    hf = hf_model(checkpoint)
    assert vision_error(checkpoint, hf, images) < 1e-4
    monkeypatch.setattr(clipped_linear, "clamp", lambda b, x, module, side, params: x)
    assert vision_error(checkpoint, hf, images) > 1e-2


def test_standardized_tower_matches_hf(tmp_path, images, monkeypatch):
    """standardize: the pooled features as (x - std_bias) * std_scale within 1e-4 of HF; the
    graph without the standardization fails."""
    from dataclasses import replace

    checkpoint = save_gemma4(tmp_path / "ckpt", "full", standardize=True)
    hf = hf_model(checkpoint)
    assert vision_error(checkpoint, hf, images) < 1e-4
    original = axial_vit.axial_vit_dims
    monkeypatch.setattr(axial_vit, "axial_vit_dims", lambda *args: replace(original(*args), standardize=False))
    assert vision_error(checkpoint, hf, images) > 1e-2


def test_a_column_past_the_position_table_fails_as_in_hf(package, hf):
    """A 3 x 66 patch strip (columns 0..65 of the tiny tower's 64-row tables; genai's processor gives a
    wide strip such a grid): HF's embedding lookup raises IndexError, and so does vision.onnx's Gather,
    which before read the column past the table from the rows' table and ran on, silently wrong."""
    import onnxruntime as ort
    import torch

    cols, rows = 66, 3
    positions = np.stack(np.meshgrid(np.arange(cols), np.arange(rows)), -1).reshape(1, -1, 2).astype(np.int64)
    pixels = np.random.default_rng(0).uniform(0, 1, (1, cols * rows, 48)).astype(np.float32)
    with pytest.raises(IndexError), torch.no_grad():
        hf.model.get_image_features(torch.from_numpy(pixels), torch.from_numpy(positions), return_dict=True)
    session = ort.InferenceSession(str(package / "vision.onnx"))
    with pytest.raises(Exception, match="out of data bounds"):
        session.run(None, {"pixel_values": pixels, "pixel_position_ids": positions})
