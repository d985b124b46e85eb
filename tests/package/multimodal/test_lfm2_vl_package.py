"""Full LFM2-VL packages (docs/multimodal.md §14): a tiny Lfm2VlForConditionalGeneration (SigLIP2
NaFlex tower, pixel-unshuffle projector, LFM2 short-convolution + GQA decoder) exported as
vision.onnx + embedding.onnx + model.onnx + processor_config.json, against the HF class: vision
features (one image, several grids in one call, a grid smaller than the position table), decoder
logits through embedding + decoder, genai's processor pixels, greedy generation through genai's
MultiModalProcessor with one image (resized or not), two images and none, and mutants of the
pixel unshuffle, the position-table resize and the padding mask. One checkpoint, one package and
one genai model per module."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from lfm2_vl_full import (
    FACTOR,
    IMAGE,
    IMAGE_END,
    IMAGE_START,
    PATCH,
    genai_generate,
    hf_generate,
    hf_image_features,
    patch_inputs,
    save_images,
    save_lfm2_vl,
)
from reference import hf_model, hf_prompt_then_steps, ort_embedded_greedy

from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")

# pixel sizes per vision call: no resize, a 3 x 5 patch grid (edge blocks dropped), a 2 x 8 grid
# (the 4 x 4 position table shrinks along the rows), three grids padded into one call
CALLS = {
    "one": [(24, 40)],
    "odd": [(12, 20)],
    "flat": [(8, 32)],
    "three": [(8, 32), (16, 16), (24, 40)],
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_lfm2_vl(tmp_path_factory.mktemp("ckpt") / "lfm2_vl")


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "full"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="module")
def genai(package: Path):
    import onnxruntime_genai as og

    return og.Model(str(package))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_images(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


def test_package_files_and_config(package):
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "lfm2_vl" and model["image_token_id"] == IMAGE
    vision = model["vision"]
    assert vision["inputs"] == {"pixel_values": "pixel_values", "attention_mask": "attention_mask",
                                "image_sizes": "image_sizes"}  # fmt: skip
    assert (vision["patch_size"], vision["spatial_merge_size"], vision["max_num_patches"]) == (PATCH, FACTOR, 64)
    transforms = json.loads((package / "processor_config.json").read_text())["processor"]["transforms"]
    kinds = [t["operation"]["type"] for t in transforms]
    assert kinds == ["DecodeImage", "Resize", "Rescale", "Normalize", "Permute3D", "PixtralImageSizes"]
    assert transforms[1]["operation"]["attrs"]["min_pixels"] == 4 * 64
    # causal image runs: the decoder takes inputs_embeds alone, GQA with the conv states
    decoder = model["decoder"]
    assert "input_ids" not in decoder["inputs"] and decoder["layer_types"] == ["conv", "full_attention", "conv"]
    assert json.loads((package / "manifest.json").read_text())["options"]["attention"] == "gqa"


def _vision(graph: Path, sizes: list[tuple[int, int]]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    import onnxruntime as ort

    inputs = patch_inputs(sizes)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    feed = dict(zip(("pixel_values", "attention_mask", "image_sizes"), inputs, strict=True))
    return session.run(None, feed)[0], inputs


def test_vision_matches_hf_image_features(package, hf):
    for case, sizes in CALLS.items():
        got, inputs = _vision(package / "vision.onnx", sizes)
        ref = hf_image_features(hf, *inputs)
        assert got.shape == ref.shape
        print(f"{case}: max |diff| {np.abs(got - ref).max():.3g} (values to {np.abs(ref).max():.3g})")
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _unshuffle_by_columns(monkeypatch):
    from gqa_export.graph.encoders import naflex_vit

    monkeypatch.setattr(naflex_vit, "BLOCK_ORDER", "columns")


def _positions_without_antialias(monkeypatch):
    from gqa_export.graph.encoders import antialias_positions

    monkeypatch.setattr(antialias_positions, "ANTIALIAS", False)


def _padding_attended(monkeypatch):
    from gqa_export.graph.encoders import naflex_vit

    key_bias = naflex_vit.key_bias  # every patch kept: a mask of ones
    ones = lambda b, mask: b.op("Add", b.op("Mul", mask, b.const(0, "zero", "int64")), b.const(1, "one", "int64"))  # noqa: E731
    monkeypatch.setattr(naflex_vit, "key_bias", lambda b, mask, dtype: key_bias(b, ones(b, mask), dtype))


def _vision_graph(checkpoint: Path, out: Path) -> Path:
    import transformers as tf

    from gqa_export.graph.encoders.naflex_vit import build_naflex_vit, naflex_vit_dims
    from gqa_export.graph.params import Params
    from gqa_export.source.weights import WeightStore

    store = WeightStore.open(checkpoint)
    dims = naflex_vit_dims(tf.AutoConfig.from_pretrained(checkpoint), 64, store)
    ir.save(build_naflex_vit(dims, Params(store, ir.DataType.FLOAT)), out, external_data=f"{out.name}.data")
    return out


def test_hub_layout_tower_matches_hf(checkpoint, hf, tmp_path):
    """The published checkpoints keep SigLIP2's `vision_model.` level (model.vision_tower.vision_model.*,
    which transformers 5.x drops on load): the tower is found by suffix and its features are HF's."""
    import shutil

    from safetensors.numpy import load_file, save_file

    hub = tmp_path / "hub"
    hub.mkdir()
    shutil.copy(checkpoint / "config.json", hub)
    tensors = load_file(str(checkpoint / "model.safetensors"))
    renamed = {k.replace("model.vision_tower.", "model.vision_tower.vision_model."): v for k, v in tensors.items()}
    save_file(renamed, str(hub / "model.safetensors"), metadata={"format": "pt"})
    got, inputs = _vision(_vision_graph(hub, tmp_path / "v.onnx"), CALLS["three"])
    np.testing.assert_allclose(got, hf_image_features(hf, *inputs), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mutate", [_unshuffle_by_columns, _positions_without_antialias, _padding_attended])
def test_mutant_vision_fails(checkpoint, hf, tmp_path, monkeypatch, mutate):
    """A block's patches read column-major, the position table shrunk without antialiasing, the
    padding patches attended: each leaves the 1e-4 bound on the three-grid call."""
    mutate(monkeypatch)
    got, inputs = _vision(_vision_graph(checkpoint, tmp_path / "v.onnx"), CALLS["three"])
    diff = np.abs(got - hf_image_features(hf, *inputs)).max()
    print(f"{mutate.__name__}: max |diff| {diff:.3g}")
    assert diff > 1e-2


def _ort_logits(package: Path, prompt: list[int], features: np.ndarray | None, steps: int):
    """embedding.onnx then model.onnx as genai steps them: features on the prompt, 0 rows after."""
    return ort_embedded_greedy(
        package, prompt, {} if features is None else {"image_features": features}, steps, max_length=128
    )


def _hf_logits(hf, prompt: list[int], inputs: tuple[np.ndarray, ...] | None, tokens: list[int]) -> np.ndarray:
    import torch

    extra = {}
    if inputs is not None:
        names = ("pixel_values", "pixel_attention_mask", "spatial_shapes")
        extra = {name: torch.from_numpy(v) for name, v in zip(names, inputs, strict=True)}
    return hf_prompt_then_steps(hf, prompt, tokens, **extra)


@pytest.mark.parametrize("case", ["two_images", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, case):
    """Prompt + 6 decode steps within 1e-4 of the HF class: two images of different grids (their
    features from vision.onnx in one call), a text prompt longer than the conv kernel, a 1-token
    prompt."""
    blocks = [IMAGE_START, *[IMAGE] * 15, IMAGE_END, 99, IMAGE_START, *[IMAGE] * 4, IMAGE_END]
    prompt = {"two_images": [17, 45, *blocks, 200, 3, 64], "text": [17, 45, 99, 200, 3, 7, 64, 12], "one_token": [0]}
    inputs = patch_inputs([(24, 40), (8, 32)]) if case == "two_images" else None
    features = _vision(package / "vision.onnx", [(24, 40), (8, 32)])[0] if inputs is not None else None
    got, tokens = _ort_logits(package, prompt[case], features, steps=6)
    ref = _hf_logits(hf, prompt[case], inputs, tokens)
    print(f"{case}: max |diff| {np.abs(got - ref).max():.3g}")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_placeholder_without_feature_row_embeds_as_token(package, checkpoint):
    """After the prompt there are 0 feature rows: a generated <image> id embeds as the token."""
    import onnxruntime as ort
    from safetensors.numpy import load_file

    table = load_file(str(checkpoint / "model.safetensors"))["model.language_model.embed_tokens.weight"]
    embedding = ort.InferenceSession(str(package / "embedding.onnx"))
    ids = np.array([[IMAGE, 17, IMAGE]], np.int64)
    got = embedding.run(None, {"input_ids": ids, "image_features": np.zeros((0, 64), np.float32)})[0][0]
    np.testing.assert_allclose(got, table[ids[0]], atol=0, rtol=0)


def test_processor_ids_and_pixels(genai, images):
    """genai's processor: <image> becomes <|image_start|> + 15 <image> + <|image_end|> for a 6 x 10
    patch grid (HF's single-tile expansion), pixel_values = HF's patch layout of the PNG (rescaled,
    normalized, patches row-major, each patch's pixels row-major channels last) within 1e-6,
    padded to 64 patches with a 0 mask; the resized image keeps HF's grid (24 x 40 pixels)."""
    import onnxruntime_genai as og
    from PIL import Image
    from transformers.models.siglip2.image_processing_pil_siglip2 import convert_image_to_patches

    processor = genai.create_multimodal_processor()
    for name in ("same", "wide"):
        got = processor("<image>hi", images=og.Images.open(str(images[name])))
        ids = got["input_ids"].as_numpy()[0].tolist()
        assert ids[:17] == [IMAGE_START, *[IMAGE] * 15, IMAGE_END]
        assert got["image_sizes"].as_numpy().tolist() == [[6, 10]]
        mask = got["image_attention_mask"].as_numpy()
        assert mask.shape == (1, 64) and mask.sum() == 60 and mask[0, :60].all()
    pixels = np.asarray(Image.open(images["same"]).convert("RGB"), np.float32).transpose(2, 0, 1) / 255
    ref = convert_image_to_patches((pixels - 0.5) / 0.5, PATCH)
    values = processor("<image>", images=og.Images.open(str(images["same"])))["pixel_values"].as_numpy()
    np.testing.assert_allclose(values[0, :60], ref, atol=1e-6, rtol=0)
    assert not values[0, 60:].any()


def test_adjacent_markers_keep_image_order(genai, images):
    """Two adjacent <image> markers with images of different grids expand in image order (probed:
    unlike mistral3's [IMG][IMG], §12.2)."""
    import onnxruntime_genai as og

    processor = genai.create_multimodal_processor()
    ids = processor("<image><image>", images=og.Images.open(str(images["same"]), str(images["flat"])))
    block = [IMAGE_START, *[IMAGE] * 15, IMAGE_END, IMAGE_START, *[IMAGE] * 4, IMAGE_END]
    assert ids["input_ids"].as_numpy()[0].tolist() == block


CASES = {
    "one_image": ("<image>Describe the quick brown fox", ["same"]),
    "resized_image": ("<image>Describe the quick brown fox", ["wide"]),
    "two_sizes": ("Look <image> and <image> then read", ["same", "flat"]),
    "no_image": ("Describe the quick brown fox", []),
}


@pytest.mark.parametrize("case", CASES)
def test_genai_generate_matches_hf(genai, hf, images, case):
    prompt, names = CASES[case]
    arrays, tokens = genai_generate(genai, prompt, [images[n] for n in names])
    assert len(set(tokens)) > 1  # not one repeated id
    assert tokens == hf_generate(hf, arrays)


def test_split_is_refused(checkpoint, tmp_path):
    with pytest.raises(InputError, match="--attention split cannot run a full multimodal package"):
        build(BuildOptions(str(checkpoint), tmp_path / "split", smoke=False, attention="split"))


def test_run_inserts_the_marker(package, hf, images):
    """`run --image` without a marker puts <image> in front; the tokens are HF's for the same ids."""
    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    result = generate_with_images(package, "cpu", "Describe", [images["same"]], 8, Sampling())
    assert len(result.tokens) == 8


def test_run_refuses_images_genai_cannot_batch(package, tmp_path):
    """genai 0.18's lfm2_vl processor pads a prompt's images into one image's size: two images of which
    neither is as tall and as wide as the other (24 x 40 and 40 x 24; 24 x 40 with 8 x 32 runs, above) fail
    inside it, which `run` says in one line (exit 2) naming the rule, not the files."""
    from cli_runner import invoke
    from PIL import Image

    files = []
    for h, w in ((24, 40), (40, 24)):
        files.append(tmp_path / f"{h}x{w}.png")
        Image.fromarray(np.full((h, w, 3), 128, np.uint8)).save(files[-1])
    result = invoke("run", package, "--image", files[0], "--image", files[1], "--prompt", "x", "--max-new-tokens", 2)
    assert result.exit_code == 2 and "as tall and as wide as every other" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_combined_processor_config_and_tiling_note(checkpoint, tmp_path):
    """transformers 5.x saves the image processor inside processor_config.json: its values are
    read from there; with do_image_splitting (the published default) the build notes that genai
    resizes the images HF would tile (§14.2)."""
    import shutil

    source = tmp_path / "ckpt"
    shutil.copytree(checkpoint, source)
    pre = json.loads((source / "preprocessor_config.json").read_text())
    (source / "preprocessor_config.json").unlink()
    pre.update(do_image_splitting=True, min_image_tokens=2)
    (source / "processor_config.json").write_text(json.dumps({"image_processor": pre}))
    result = build(BuildOptions(str(source), tmp_path / "pkg", smoke=False))
    assert any("would tile" in note for note in result.notes)
    transforms = json.loads((tmp_path / "pkg" / "processor_config.json").read_text())["processor"]["transforms"]
    assert transforms[1]["operation"]["attrs"]["min_pixels"] == 2 * 64
    _run_notes_the_tiled_image(tmp_path / "pkg", tmp_path)


def _run_notes_the_tiled_image(tiling: Path, folder: Path) -> None:
    """`run --image` on the tiling checkpoint's package: an image above HF's threshold (16 tokens x
    64 pixels x tolerance 2: 44 x 44 tiles, 43 x 43 does not) gets the note, in --json too; one
    below it gets none."""
    from PIL import Image
    from typer.testing import CliRunner

    from gqa_export.cli import app

    for side in (43, 44):
        Image.new("RGB", (side, side), (90, 30, 200)).save(folder / f"{side}.png")
    args = ["run", str(tiling), "--prompt", "Describe", "--max-new-tokens", "2", "--json"]
    shown = CliRunner().invoke(app, [*args, "--image", str(folder / "44.png")])
    assert shown.exit_code == 0, shown.output
    note = json.loads(shown.output.strip().splitlines()[-1])["note"]
    assert "HF's processor tiles 44.png (44 x 44)" in note and "fit within 43 x 43" in note
    below = CliRunner().invoke(app, [*args, "--image", str(folder / "43.png")])
    assert json.loads(below.output.strip().splitlines()[-1])["note"] is None


def test_run_does_not_note_where_hf_does_not_tile(package, tmp_path):
    """The fixture's do_image_splitting is false: the same large image gets no note (mutant of the
    rule ignoring the flag), and the manifest holds no tiling rule."""
    from PIL import Image

    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    assert "hf_image_tiling" not in json.loads((package / "manifest.json").read_text())["model"]
    Image.new("RGB", (60, 60), (90, 30, 200)).save(tmp_path / "big.png")
    assert generate_with_images(package, "cpu", "Describe", [tmp_path / "big.png"], 2, Sampling()).note is None


def test_image_size_reads_png_and_jpeg_headers(tmp_path):
    """Sizes without PIL at runtime (PNG IHDR, JPEG start of frame, baseline and progressive), None
    for another format; HF's threshold for the published budget (256 tokens, 32-pixel units) is
    720 x 720 (721 rounds to 23 units, half to even keeps 720 at 22)."""
    from PIL import Image

    from gqa_export.runtime.image_tiling import hf_tiles, image_size, largest_square

    picture = Image.new("RGB", (37, 21))
    picture.save(tmp_path / "a.png")
    picture.save(tmp_path / "b.jpg")
    picture.save(tmp_path / "c.jpg", progressive=True)
    picture.save(tmp_path / "d.bmp")
    assert [image_size(tmp_path / n) for n in ("a.png", "b.jpg", "c.jpg", "d.bmp")] == [(21, 37)] * 3 + [None]
    published = {"encoder_patch_size": 16, "downsample_factor": 2, "max_image_tokens": 256, "max_pixels_tolerance": 2}
    assert largest_square(published) == 720 and hf_tiles(721, 721, published) and not hf_tiles(720, 720, published)
    assert hf_tiles(6000, 100, published) and not hf_tiles(5000, 100, published)  # long and thin
