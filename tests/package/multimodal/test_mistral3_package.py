"""Full Mistral-3 packages (docs/multimodal.md §12): a tiny Mistral3ForConditionalGeneration
(Pixtral tower, patch merger) exported as vision.onnx + embedding.onnx + model.onnx +
processor_config.json, against the HF class: the vision features (one image, images of different
sizes in one call), genai's processor pixel_values, greedy generation through genai's
MultiModalProcessor with one and two images and without an image, an int4 decoder, and mutants of
the 2-D rotary embedding, the block-diagonal mask and the merger's row order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from mistral3_full import (
    IMG,
    NEW,
    genai_generate,
    genai_process,
    hf_generate,
    hf_image_features,
    hf_pixels,
    image_block,
    save_images,
)
from multimodal_models import save_multimodal
from reference import hf_model, hf_prompt_then_steps, ort_embedded_greedy

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_multimodal(tmp_path_factory.mktemp("ckpt") / "mistral3_full", "mistral3_full")


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "full"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


def test_package_files_and_config(package):
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "mistral3" and model["image_token_id"] == IMG
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values", "image_sizes": "image_sizes"}
    assert (model["vision"]["patch_size"], model["vision"]["spatial_merge_size"]) == (4, 2)
    transforms = json.loads((package / "processor_config.json").read_text())["processor"]["transforms"]
    kinds = [t["operation"]["type"] for t in transforms]
    assert kinds == ["DecodeImage", "Resize", "Rescale", "Normalize", "Permute3D", "PixtralImageSizes"]
    # no image-run mask: the decoder takes inputs_embeds alone, GroupQueryAttention (auto)
    assert "input_ids" not in model["decoder"]["inputs"] and "inputs_embeds" in model["decoder"]["inputs"]
    assert json.loads((package / "manifest.json").read_text())["options"]["attention"] == "gqa"


def _padded(sizes: list[tuple[int, int]], seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Random pixels of images of `sizes`, zero-padded bottom/right to the largest (HF's batch)."""
    rng = np.random.default_rng(seed)
    pixels = np.zeros((len(sizes), 3, max(h for h, _ in sizes), max(w for _, w in sizes)), np.float32)
    for i, (h, w) in enumerate(sizes):
        pixels[i, :, :h, :w] = rng.uniform(-1, 1, (3, h, w))
    return pixels, np.array(sizes, np.int64)


def _vision(graph: Path, pixel_values: np.ndarray, image_sizes: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixel_values, "image_sizes": image_sizes})[0]


CALLS = {"one": [(32, 48)], "two_sizes": [(32, 48), (16, 24)], "tall_and_small": [(16, 24), (48, 32)]}


@pytest.mark.parametrize("case", CALLS)
def test_vision_matches_hf_image_features(package, hf, case):
    pixels, sizes = _padded(CALLS[case])
    got, ref = _vision(package / "vision.onnx", pixels, sizes), hf_image_features(hf, pixels, sizes)
    assert got.shape == ref.shape
    print(f"{case}: max |diff| {np.abs(got - ref).max():.3g} (values to {np.abs(ref).max():.3g})")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_vision_one_cropped_image_with_all_sizes(package, hf):
    """genai's multi-image run: each image alone, cropped to its size, with every image's size
    in image_sizes (§12): the graph takes the pixels' own size."""
    pixels, sizes = _padded([(16, 24)])
    got = _vision(package / "vision.onnx", pixels, np.array([[32, 48], [16, 24]], np.int64))
    np.testing.assert_allclose(got, hf_image_features(hf, pixels, sizes), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("arch", "hub_layout", "side"), [("ministral3", True, 28), ("mistral3_full", False, 8)])
def test_other_layouts_build_exact_towers(tmp_path, arch, hub_layout, side):
    """A ministral3 text config (recipe ministral3_vision, GELU tower, patch 14) and transformers
    5.x's tensor names (`model.vision_tower.`): the full package's vision graph = HF's features."""
    checkpoint = save_multimodal(tmp_path / "ckpt", arch, hub_layout=hub_layout)
    out = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    assert json.loads((out / "genai_config.json").read_text())["model"]["type"] == "mistral3"
    pixels, sizes = _padded([(2 * side, 4 * side), (2 * side, 2 * side)])
    got = _vision(out / "vision.onnx", pixels, sizes)
    np.testing.assert_allclose(got, hf_image_features(hf_model(checkpoint), pixels, sizes), atol=1e-4, rtol=1e-4)


def _ort_logits(package: Path, prompt: list[int], features: np.ndarray | None, steps: int):
    """embedding.onnx then model.onnx as genai steps them: features on the prompt, 0 rows after."""
    rows = {} if features is None else {"image_features": features}
    return ort_embedded_greedy(package, prompt, rows, steps)


def _hf_logits(hf, prompt: list[int], pixels: dict[str, np.ndarray] | None, tokens: list[int]) -> np.ndarray:
    import torch

    return hf_prompt_then_steps(hf, prompt, tokens, **{k: torch.from_numpy(v) for k, v in (pixels or {}).items()})


@pytest.mark.parametrize("case", ["image", "two_sizes", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, case):
    """Prompt + 6 decode steps within 1e-4 of the HF class: with images (their features from
    vision.onnx in one call), a text prompt, a 1-token prompt."""
    calls = {"image": [(32, 48)], "two_sizes": [(32, 48), (16, 24)]}
    blocks = {"image": image_block(4, 6), "two_sizes": [*image_block(4, 6), 99, *image_block(2, 3)]}
    prompt = [0, 17, 45, *blocks.get(case, []), 99, 200, 3, 7, 64, 12] if case != "one_token" else [0]
    pixels = dict(zip(("pixel_values", "image_sizes"), _padded(calls[case]), strict=True)) if case in calls else None
    features = _vision(package / "vision.onnx", **pixels) if pixels else None
    got, tokens = _ort_logits(package, prompt, features, steps=6)
    ref = _hf_logits(hf, prompt, pixels, tokens)
    print(f"{case}: max |diff| {np.abs(got - ref).max():.3g}")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _mutant_vision(checkpoint: Path, out: Path) -> Path:
    import transformers as tf

    from gqa_export.graph.encoders.pixtral import build_pixtral, pixtral_dims
    from gqa_export.graph.params import Params
    from gqa_export.source.weights import WeightStore

    store = WeightStore.open(checkpoint)
    dims = pixtral_dims(tf.AutoConfig.from_pretrained(checkpoint), 64, store)
    ir.save(build_pixtral(dims, Params(store, ir.DataType.FLOAT)), out, external_data=f"{out.name}.data")
    return out


def _swap_rope(monkeypatch):
    from gqa_export.graph.encoders import pixtral

    rotary = pixtral._Tower.rotary
    monkeypatch.setattr(pixtral._Tower, "rotary", lambda self, h, w: rotary(self, w, h))


def _no_block_mask(monkeypatch):
    from gqa_export.graph.encoders import pixtral

    monkeypatch.setattr(pixtral, "segment_bias", lambda b, key, dtype, name: b.const(np.zeros((), np.float32), name))


def _patch_major_merge(monkeypatch):
    from gqa_export.graph.encoders import pixtral

    monkeypatch.setattr(pixtral, "BLOCK_ROW_PERM", (0, 1, 2))


@pytest.mark.parametrize("mutate", [_swap_rope, _no_block_mask, _patch_major_merge])
def test_mutant_vision_fails(checkpoint, hf, tmp_path, monkeypatch, mutate):
    """The 2-D rope's h and w swapped, attention across images, a merged row read patch-major:
    each leaves the 1e-4 bound on the two-size call."""
    mutate(monkeypatch)
    graph = _mutant_vision(checkpoint, tmp_path / "v.onnx")
    pixels, sizes = _padded(CALLS["two_sizes"])
    diff = np.abs(_vision(graph, pixels, sizes) - hf_image_features(hf, pixels, sizes)).max()
    print(f"{mutate.__name__}: max |diff| {diff:.3g}")
    assert diff > 1e-2


def test_processor_pixels_match_hf(package, images):
    """No resize needed: genai's pixel_values and image_sizes equal HF's PixtralImageProcessor."""
    files = [images["grid4x6"]]
    got, ref = genai_process(package, "[IMG]hi", files), hf_pixels(files)
    np.testing.assert_array_equal(got["image_sizes"], ref["image_sizes"])
    np.testing.assert_allclose(got["pixel_values"], ref["pixel_values"], atol=1e-6, rtol=0)
    assert got["input_ids"][0].tolist()[:28] == image_block(4, 6)


def test_resize_difference_pinned(package, images):
    """A 40 x 100 image: HF scales the longest edge to 64 and rounds up to patches (28 x 64);
    genai's smart resize rounds to multiples of patch·merge within max_pixels (§12): not equal."""
    files = [images["wide"]]
    got, ref = genai_process(package, "[IMG]", files), hf_pixels(files)
    assert ref["image_sizes"].tolist() == [[28, 64]]
    assert got["image_sizes"].tolist() != ref["image_sizes"].tolist()


def test_adjacent_markers_read_as_one_image_pinned(package, images):
    """genai 0.18 reads a run of adjacent [IMG] as one image (the first); the other images'
    blocks go in front of the prompt (probed): the second image's block comes first here."""
    ids = genai_process(package, "[IMG][IMG]", [images["grid4x6"], images["grid2x3"]])["input_ids"][0].tolist()
    assert ids == image_block(2, 3) + image_block(4, 6)
    ids = genai_process(package, "[IMG]\n[IMG]", [images["grid4x6"], images["grid2x3"]])["input_ids"][0].tolist()
    assert ids[:28] == image_block(4, 6) and ids[-8:] == image_block(2, 3)


CASES = {
    "one_image": ("[IMG]Describe the picture", ["grid4x6"]),
    "tall_image": ("Look [IMG] now", ["grid6x4"]),
    "two_images": ("[IMG]\n[IMG]\nCompare", ["grid4x6", "grid4x6b"]),
    "two_sizes": ("Left [IMG] right [IMG] compare", ["grid4x6", "grid2x3"]),
    "no_image": ("Describe the picture", []),
}


@pytest.mark.parametrize("case", CASES)
def test_genai_generate_matches_hf(package, hf, images, case):
    prompt, names = CASES[case]
    arrays, tokens = genai_generate(package, prompt, [images[n] for n in names])
    if names:
        ref = hf_pixels([images[n] for n in names])
        np.testing.assert_allclose(arrays["pixel_values"], ref["pixel_values"], atol=1e-6, rtol=0)
    assert len(set(tokens)) > 1  # not one repeated id
    assert tokens == hf_generate(hf, arrays)


def test_bias_decoder_matches_hf(checkpoint, hf, images, tmp_path):
    """--attention bias: the standard-Attention decoder (inputs_embeds alone) gives HF's tokens too."""
    out = tmp_path / "bias"
    build(BuildOptions(str(checkpoint), out, smoke=False, attention="bias"))
    assert json.loads((out / "manifest.json").read_text())["options"]["attention"] == "bias"
    arrays, tokens = genai_generate(out, "Left [IMG] right [IMG] compare", [images["grid4x6"], images["grid2x3"]])
    assert tokens == hf_generate(hf, arrays)


def test_split_is_refused(checkpoint, tmp_path):
    with pytest.raises(InputError, match="--attention split cannot run a full multimodal package"):
        build(BuildOptions(str(checkpoint), tmp_path / "split", smoke=False, attention="split"))


def test_int4_decoder_runs_with_an_image(checkpoint, images, tmp_path):
    out = tmp_path / "int4"
    build(BuildOptions(str(checkpoint), out, smoke=False, precision="int4"))
    arrays, tokens = genai_generate(out, "[IMG]Describe", [images["grid4x6"]])
    assert arrays["input_ids"].shape[1] > 28 and len(tokens) == 24


def test_run_separates_prepended_markers(package, hf, images):
    """`run --image a --image b` without markers: the markers go in front one per line, so genai
    keeps the images in order, and the tokens are HF's for the same ids."""
    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    files = [images["grid4x6"], images["grid2x3"]]
    result = generate_with_images(package, "cpu", "Compare", files, NEW, Sampling())
    arrays, _ = genai_generate(package, "<|begin_of_text|>[IMG]\n[IMG]\nCompare", files)
    assert len(result.tokens) > 4 and result.tokens == hf_generate(hf, arrays)[: len(result.tokens)]


def test_run_refuses_adjacent_markers(package, images):
    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    with pytest.raises(InputError, match=r"adjacent '\[IMG\]\[IMG\]' markers as one image"):
        generate_with_images(package, "cpu", "[IMG][IMG]Compare", [images["grid4x6"], images["grid2x3"]], 4, Sampling())
