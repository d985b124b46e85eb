"""Gemma-4 full packages (docs/multimodal.md §13): a tiny Gemma4ForConditionalGeneration (tests/
gemma4_models.py form "full": patch 4, 3 x 3 pooling, 70 soft tokens at most, no audio) exported
as vision.onnx (axial-rotary ViT, position pooling, projector) + embedding.onnx + the gemma4
decoder (inputs_embeds and input_ids), run through onnxruntime-genai's gemma4 processor against
HF generate; the vision features against HF's get_image_features; mutants of the tower."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from gemma4_models import FULL_PROCESSOR, save_gemma4
from reference import hf_model

from gqa_export.graph.encoders import axial_vit
from gqa_export.graph.params import Params
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source.weights import WeightStore

pytest.importorskip("PIL")
NEW = 20
MAX_PATCHES = FULL_PROCESSOR["max_soft_tokens"] * FULL_PROCESSOR["pooling_kernel_size"] ** 2


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return save_gemma4(tmp_path_factory.mktemp("gemma4_full") / "ckpt", "full")


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gemma4_full_pkg") / "pkg"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    """exact: 84 x 120 random pixels, 630 patches (no resize); resized: a smooth 48 x 64 gradient
    (bicubic up to 84 x 108: genai and PIL then differ by about 1/255)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("gemma4_images")
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:48, 0:64]
    smooth = np.stack([xx * 200 // 64 + 20, yy * 200 // 48 + 20, (xx + yy) * 100 // 112 + 60], -1)
    arrays = {"exact": rng.integers(0, 256, (84, 120, 3), dtype=np.uint8), "resized": smooth.astype(np.uint8)}
    made = {}
    for name, array in arrays.items():
        made[name] = folder / f"{name}.png"
        Image.fromarray(array).save(made[name])
    return made


def _hf_pixels(files: list[Path]) -> dict[str, Any]:
    from PIL import Image
    from transformers import Gemma4ImageProcessorPil

    out = Gemma4ImageProcessorPil(**FULL_PROCESSOR)([Image.open(f) for f in files], return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_position_ids": out["image_position_ids"]}


def _padded(pixels: np.ndarray, positions: np.ndarray) -> dict[str, Any]:
    """genai's unpadded patches in HF's padded form (zero rows, position -1)."""
    import torch

    n, p, width = pixels.shape
    pv = np.zeros((n, MAX_PATCHES, width), np.float32)
    pos = np.full((n, MAX_PATCHES, 2), -1, np.int64)
    pv[:, :p], pos[:, :p] = pixels, positions
    return {"pixel_values": torch.from_numpy(pv), "image_position_ids": torch.from_numpy(pos)}


def _genai(package: Path, prompt: str, files: list[Path]) -> tuple[np.ndarray, dict[str, np.ndarray], list[int]]:
    import onnxruntime_genai as og

    model = og.Model(str(package))
    inputs = model.create_multimodal_processor()(prompt, images=og.Images.open(*map(str, files)) if files else None)
    ids = inputs["input_ids"].as_numpy().astype(np.int64)
    extra = {k: inputs[k].as_numpy() for k in ("pixel_values", "pixel_position_ids")} if files else {}
    params = og.GeneratorParams(model)
    length = ids.shape[1] + NEW
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return ids, extra, tokens


def _hf_generate(hf, ids: np.ndarray, pixels: dict[str, Any]) -> list[int]:
    import torch

    ids_t = torch.from_numpy(ids)
    extra = {**pixels, "mm_token_type_ids": (ids_t == hf.config.image_token_id).long()}
    with torch.no_grad():
        out = hf.generate(ids_t, attention_mask=torch.ones_like(ids_t), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW, **extra)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def test_package_config(package):
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "gemma4" and model["image_token_id"] == 7
    assert model["speech"] == {"config_filename": ""}  # else genai looks for an audio config and fails
    assert set(model["vision"]["inputs"]) == {"pixel_values", "pixel_position_ids"}
    assert set(model["decoder"]["inputs"]) >= {"inputs_embeds", "input_ids"}
    transforms = json.loads((package / "processor_config.json").read_text())["processor"]["transforms"]
    assert [t["operation"]["type"] for t in transforms] == ["DecodeImage", "Gemma4ImageTransform"]
    assert transforms[1]["operation"]["attrs"] == {"patch_size": 4, "max_soft_tokens": 70, "pooling_kernel_size": 3}


def _vision_error(checkpoint: Path, hf, images: dict[str, Path]) -> float:
    """max |ORT - HF get_image_features| over both images (HF: its own padded pixels; the graph:
    the same patches unpadded, as genai feeds them)."""
    import onnxruntime as ort
    import torch

    store = WeightStore.open(checkpoint)
    dims = axial_vit.axial_vit_dims(hf.config, hf.config.text_config.hidden_size, store)
    proto = ir.to_proto(axial_vit.build_axial_vit(dims, Params(store, ir.DataType.FLOAT)))
    session = ort.InferenceSession(proto.SerializeToString())
    worst = 0.0
    for file in images.values():
        pixels = _hf_pixels([file])
        with torch.no_grad():
            ref = hf.model.get_image_features(pixels["pixel_values"], pixels["image_position_ids"], return_dict=True)
        keep = (pixels["image_position_ids"][0] != -1).all(-1).numpy()
        feed = {"pixel_values": pixels["pixel_values"][:, keep].numpy(),
                "pixel_position_ids": pixels["image_position_ids"][:, keep].numpy()}  # fmt: skip
        got = session.run(None, feed)[0]
        assert got.shape == ref.pooler_output[0].shape
        worst = max(worst, float(np.abs(got - ref.pooler_output[0].numpy()).max()))
    return worst


def test_vision_matches_hf_image_features(checkpoint, hf, images):
    assert _vision_error(checkpoint, hf, images) < 1e-4


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
    assert _vision_error(checkpoint, hf, images) > 1e-2


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
    ids, extra, tokens = _genai(package, prompt, files)
    assert len(set(tokens)) > 3
    if files:
        pixels = _hf_pixels(files)
        keep = (pixels["image_position_ids"] != -1).all(-1).numpy()
        np.testing.assert_allclose(extra["pixel_values"], pixels["pixel_values"].numpy()[keep].reshape(
            extra["pixel_values"].shape), atol=1e-6)  # fmt: skip
        assert (ids == 7).sum() == sum(k.sum() // 9 for k in keep)
    assert tokens == _hf_generate(hf, ids, _hf_pixels(files) if files else {})


@pytest.mark.parametrize("count", [1, 2])
def test_genai_resized_images_equal_hf_on_genai_pixels(package, hf, images, count):
    """A resized image: genai's bicubic differs from PIL's by about 1/255 (pinned), so HF is fed
    genai's own patches (padded as HF pads them) and generates the same tokens."""
    files = [images["resized"]] * count
    ids, extra, tokens = _genai(package, " and ".join(["<|image|>"] * count) + " what", files)
    hf_pixels = _hf_pixels(files)
    keep = (hf_pixels["image_position_ids"][0] != -1).all(-1).numpy()
    drift = np.abs(extra["pixel_values"][0] - hf_pixels["pixel_values"][0].numpy()[keep]).max()
    assert 1e-3 < drift < 0.005  # genai's bicubic rounding
    assert tokens == _hf_generate(hf, ids, _padded(extra["pixel_values"], extra["pixel_position_ids"]))


def test_int4_decoder_runs_with_an_image(checkpoint, images, tmp_path):
    out = tmp_path / "int4"
    build(BuildOptions(str(checkpoint), out, precision="int4", smoke=False))
    _, _, tokens = _genai(out, "<|image|>Describe it", [images["exact"]])
    assert len(tokens) == NEW and len(set(tokens)) > 1


# BOS, text, an image block as genai expands <|image|> (70 soft tokens of the 84 x 120 image), text
BLOCK = [6, *[7] * 70, 8]
IMAGE_PROMPT = [0, 17, 45, 99, *BLOCK, 200, 3, 64, 12]


def _features(package: Path, pixels: dict[str, Any]) -> np.ndarray:
    import onnxruntime as ort

    keep = (pixels["image_position_ids"][0] != -1).all(-1).numpy()
    feed = {"pixel_values": pixels["pixel_values"][:, keep].numpy(),
            "pixel_position_ids": pixels["image_position_ids"][:, keep].numpy()}  # fmt: skip
    return ort.InferenceSession(str(package / "vision.onnx")).run(None, feed)[0]


def _ort_logits(package: Path, prompt: list[int], features: np.ndarray | None, steps: int) -> tuple[np.ndarray, list]:
    """embedding.onnx then model.onnx as genai steps them: features on the prompt, 0 rows after."""
    import onnxruntime as ort
    from reference import OrtStepper

    embedding, decoder = ort.InferenceSession(str(package / "embedding.onnx")), OrtStepper(package, max_length=256)

    def step(ids: list[int], rows: np.ndarray | None) -> np.ndarray:
        rows = np.zeros((0, 64), np.float32) if rows is None else rows
        embeds = embedding.run(None, {"input_ids": np.array([ids], np.int64), "image_features": rows})[0]
        return decoder.step(ids, {"inputs_embeds": embeds})

    logits, tokens = [step(prompt, features)], []
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        logits.append(step([tokens[-1]], None))
    return np.concatenate(logits), tokens


def _hf_logits(hf, prompt: list[int], pixels: dict[str, Any], tokens: list[int]) -> np.ndarray:
    import torch

    ids = torch.tensor([prompt])
    extra = {**pixels, "mm_token_type_ids": (ids == 7).long()} if pixels else {}
    with torch.no_grad():
        out = hf(ids, use_cache=True, **extra)
        logits, past = [out.logits[0].numpy()], out.past_key_values
        for token in tokens:
            out = hf(torch.tensor([[token]]), past_key_values=past, use_cache=True)
            logits.append(out.logits[0].numpy())
            past = out.past_key_values
    return np.concatenate(logits)


@pytest.mark.parametrize("case", ["image", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, images, case):
    """Prompt + 6 decode steps within 1e-4 of the HF class: the image's features, the image run
    bidirectional on sliding layers (from input_ids), per-layer embeddings of placeholders as pad."""
    pixels = _hf_pixels([images["exact"]]) if case == "image" else {}
    prompt = {"image": IMAGE_PROMPT, "text": [0, 17, 45, 99, 200, 3, 64, 12], "one_token": [0]}[case]
    got, tokens = _ort_logits(package, prompt, _features(package, pixels) if pixels else None, steps=6)
    np.testing.assert_allclose(got, _hf_logits(hf, prompt, pixels, tokens), atol=1e-4, rtol=1e-4)


def test_mutant_per_layer_placeholders_as_ids_fail(checkpoint, package, hf, images, tmp_path, monkeypatch):
    """The decoder's per-layer embeddings reading the image placeholders' own ids (HF reads
    pad_token_id there): the image prompt's logits leave the bound."""
    from gqa_export.graph import decoder

    monkeypatch.setattr(decoder, "_placeholders_as_pad", lambda b, ids, dims: ids)
    mutant = tmp_path / "mutant"
    build(BuildOptions(str(checkpoint), mutant, smoke=False))
    pixels = _hf_pixels([images["exact"]])
    got, tokens = _ort_logits(mutant, IMAGE_PROMPT, _features(package, pixels), steps=0)
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


def test_audio_tower_is_noted_not_exported(tmp_path):
    """A checkpoint with an audio tower: the vision package, the note says audio is not run."""
    checkpoint = save_gemma4(tmp_path / "ckpt", "full", with_audio=True)
    result = build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert any("audio tower is not exported" in note for note in result.notes)
    model = json.loads((tmp_path / "pkg" / "genai_config.json").read_text())["model"]
    assert model["speech"] == {"config_filename": ""} and "vision" in model


def test_pooling_other_than_three_refused(tmp_path):
    """genai's gemma4 processor trims patches for 3 x 3 pooling only: 2 x 2 is refused in one line."""
    from gqa_export.errors import InputError

    checkpoint = save_gemma4(tmp_path / "ckpt", "conditional")
    with pytest.raises(InputError, match="pooling_kernel_size is 2: export with --text-only"):
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))


def test_run_with_an_image_inserts_the_marker(package, images):
    """`gqa-export run PKG --image A --prompt TEXT` puts <|image|> (and the tokenizer's BOS) in
    front of a prompt without one; genai expands it to "\\n\\n<|image>" + 70 x <|image|> + "<image|>\\n\\n"."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    args = ["run", str(package), "--image", str(images["exact"]), "--prompt", "Describe it", "--json"]
    result = CliRunner().invoke(app, [*args, "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ids, _, tokens = _genai(package, "<|begin_of_text|><|image|>Describe it", [images["exact"]])
    assert ids[0, 0] == 0 and ids[0].tolist().count(7) == 70 and report["prompt_tokens"] == ids.shape[1]
    assert report["new_tokens"] == len(tokens) == NEW


def test_run_with_images_of_different_sizes_refused(package, images):
    """genai 0.18 fails on two Gemma-4 images of different token counts (a buffer-shape error):
    run refuses them in one line."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    args = ["run", str(package), "--image", str(images["exact"]), "--image", str(images["resized"]), "--prompt", "x"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "resize alike (image tokens [63, 70])" in result.output


def test_clipped_linears_match_hf(tmp_path, images, monkeypatch):
    """use_clipped_linears: every tower projection clamped by its stored bounds (input ±0.8,
    output ±0.1 here) within 1e-4 of HF; the same graph without the clamps fails."""
    checkpoint = save_gemma4(tmp_path / "ckpt", "full", clipped_linears=True)
    hf = hf_model(checkpoint)
    assert _vision_error(checkpoint, hf, images) < 1e-4
    monkeypatch.setattr(axial_vit, "_clamp", lambda b, x, module, side, params: x)
    assert _vision_error(checkpoint, hf, images) > 1e-2


def test_cuda_fp16_towers_run_on_cpu(checkpoint, hf, images, tmp_path):
    """A CUDA fp16 build exports; its vision graph (fp16 inside, float32 pixels in) runs under
    onnxruntime on CPU within fp16 rounding of HF (3.6e-3 measured) and feeds the embedding."""
    import onnxruntime as ort

    out = tmp_path / "fp16"
    build(BuildOptions(str(checkpoint), out, ep="cuda", precision="fp16", smoke=False))
    pixels = _hf_pixels([images["exact"]])
    got = _features(out, pixels)
    ref = _features_hf(hf, pixels)
    assert got.dtype == np.float16 and np.abs(got.astype(np.float32) - ref).max() < 2e-2
    embedding = ort.InferenceSession(str(out / "embedding.onnx"))
    embeds = embedding.run(None, {"input_ids": np.array([IMAGE_PROMPT]), "image_features": got})[0]
    assert embeds.shape == (1, len(IMAGE_PROMPT), 64) and np.isfinite(embeds).all()


def _features_hf(hf, pixels: dict[str, Any]) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = hf.model.get_image_features(pixels["pixel_values"], pixels["image_position_ids"], return_dict=True)
    return out.pooler_output[0].numpy()


def test_standardized_tower_matches_hf(tmp_path, images, monkeypatch):
    """standardize: the pooled features as (x - std_bias) * std_scale within 1e-4 of HF; the
    graph without the standardization fails."""
    from dataclasses import replace

    checkpoint = save_gemma4(tmp_path / "ckpt", "full", standardize=True)
    hf = hf_model(checkpoint)
    assert _vision_error(checkpoint, hf, images) < 1e-4
    original = axial_vit.axial_vit_dims
    monkeypatch.setattr(axial_vit, "axial_vit_dims", lambda *args: replace(original(*args), standardize=False))
    assert _vision_error(checkpoint, hf, images) > 1e-2


@pytest.mark.parametrize("with_image", [False, True])
def test_run_with_an_audio_marker_refused(package, images, with_image):
    """No audio tower is exported: a prompt with <|audio|> is refused in one line, with or
    without an image (its placeholder would run without audio features)."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    args = ["run", str(package), "--prompt", "<|audio|> what is said"]
    args += ["--image", str(images["exact"])] if with_image else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "exports no audio tower" in result.output
