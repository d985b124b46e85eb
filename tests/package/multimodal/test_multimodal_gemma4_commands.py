"""Gemma-4 full packages, beside their numerics (test_multimodal_gemma4.py here): the package's
genai_config and processor_config, `run --image`, the int4 and CUDA fp16 builds and the one-line
refusals (docs/multimodal.md §13); a checkpoint with an audio tower is test_multimodal_gemma4_audio.py's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gemma4_full import IMAGE_PROMPT, NEW, features, features_hf, genai_generate, hf_pixels
from gemma4_models import save_gemma4
from reference import hf_model

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


def test_package_config(package):
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "gemma4" and model["image_token_id"] == 7
    assert model["speech"] == {"config_filename": ""}  # else genai looks for an audio config and fails
    assert set(model["vision"]["inputs"]) == {"pixel_values", "pixel_position_ids"}
    assert set(model["decoder"]["inputs"]) >= {"inputs_embeds", "input_ids"}
    transforms = json.loads((package / "processor_config.json").read_text())["processor"]["transforms"]
    assert [t["operation"]["type"] for t in transforms] == ["DecodeImage", "Gemma4ImageTransform"]
    assert transforms[1]["operation"]["attrs"] == {"patch_size": 4, "max_soft_tokens": 70, "pooling_kernel_size": 3}


def test_run_with_an_image_inserts_the_marker(package, images):
    """`gqa-export run PKG --image A --prompt TEXT` puts <|image|> (and the tokenizer's BOS) in
    front of a prompt without one; genai expands it to "\\n\\n<|image>" + 70 x <|image|> + "<image|>\\n\\n"."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    args = ["run", str(package), "--image", str(images["exact"]), "--prompt", "Describe it", "--json"]
    result = CliRunner().invoke(app, [*args, "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    ids, _, tokens = genai_generate(package, "<|begin_of_text|><|image|>Describe it", [images["exact"]])
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


def test_pooling_other_than_three_refused(tmp_path):
    """genai's gemma4 processor trims patches for 3 x 3 pooling only: 2 x 2 is refused in one line."""
    from gqa_export.errors import InputError

    checkpoint = save_gemma4(tmp_path / "ckpt", "conditional")
    with pytest.raises(InputError, match="pooling_kernel_size is 2: export with --text-only"):
        build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))


def test_int4_decoder_runs_with_an_image(checkpoint, images, tmp_path):
    out = tmp_path / "int4"
    build(BuildOptions(str(checkpoint), out, precision="int4", smoke=False))
    _, _, tokens = genai_generate(out, "<|image|>Describe it", [images["exact"]])
    assert len(tokens) == NEW and len(set(tokens)) > 1


def test_cuda_fp16_towers_run_on_cpu(checkpoint, hf, images, tmp_path):
    """A CUDA fp16 build exports; its vision graph (fp16 inside, float32 pixels in) runs under
    onnxruntime on CPU within fp16 rounding of HF (3.6e-3 measured) and feeds the embedding."""
    import onnxruntime as ort

    out = tmp_path / "fp16"
    build(BuildOptions(str(checkpoint), out, ep="cuda", precision="fp16", smoke=False))
    pixels = hf_pixels([images["exact"]])
    got = features(out, pixels)
    ref = features_hf(hf, pixels)
    assert got.dtype == np.float16 and np.abs(got.astype(np.float32) - ref).max() < 2e-2
    embedding = ort.InferenceSession(str(out / "embedding.onnx"))
    embeds = embedding.run(None, {"input_ids": np.array([IMAGE_PROMPT]), "image_features": got})[0]
    assert embeds.shape == (1, len(IMAGE_PROMPT), 64) and np.isfinite(embeds).all()


def test_run_refuses_an_image_past_the_position_table(package, images, tmp_path):
    """A 12 x 600 strip: genai's resize makes it 3 x 150 patches, past the tiny tower's 64 column positions
    (the manifest's model.vision_position_limit), where HF's lookup raises IndexError: `run` says so in one
    line (exit 2) instead of genai's Gather failure; the 84 x 120 image (21 columns) runs."""
    from cli_runner import invoke
    from PIL import Image

    assert json.loads((package / "manifest.json").read_text())["model"]["vision_position_limit"] == 64
    strip = tmp_path / "strip.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (12, 600, 3), dtype=np.uint8)).save(strip)
    result = invoke("run", package, "--image", strip, "--prompt", "x", "--max-new-tokens", 2)
    assert result.exit_code == 2 and "past the 64 patch positions" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert invoke("run", package, "--image", images["exact"], "--prompt", "x", "--max-new-tokens", 2).exit_code == 0
