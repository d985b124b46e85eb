"""Qwen2.5-VL's full package (`gqa-export build`, tests/qwen_vl_package.py) through
onnxruntime-genai's own processor and generator: processor_config.json's pixel_values
and image_grid_thw against HF's Qwen2VLImageProcessor, and greedy tokens against HF generate with
images (docs/multimodal.md §11)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from qwen_vl_package import (
    MARKER,
    PREPROCESSOR,
    assemble,
    genai_greedy,
    genai_inputs,
    hf_greedy,
    hf_pixels,
    png,
    save_qwen_vl,
)
from reference import assert_varied

from gqa_export.errors import InputError
from gqa_export.package.processor_config import qwen_processor_config

# Qwen3-VL's published preprocessor values (size dict spelling, patch 16, mean/std 0.5)
QWEN3_VL = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
            "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}  # fmt: skip
# resized: 120 x 50 -> 112 x 56 (narrower, taller); wider_shorter: 80 x 62 -> 84 x 56
SIZES = {"fits": (56, 84), "upscaled": (36, 36), "resized": (120, 50), "second": (84, 112), "half_way": (100, 70),
         "wider_shorter": (80, 62), "fits_again": (56, 84)}  # fmt: skip
NEW = 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_qwen_vl(tmp_path_factory.mktemp("qwen_vl") / "checkpoint")


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return assemble(checkpoint, tmp_path_factory.mktemp("qwen_vl_pkg") / "gqa")


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("images")
    return {name: png(folder / f"{name}.png", w, h, seed) for seed, (name, (w, h)) in enumerate(SIZES.items())}


def test_writer_pipeline():
    config = qwen_processor_config(PREPROCESSOR)
    ops = [t["operation"] for t in config["processor"]["transforms"]]
    assert [op["type"] for op in ops] == ["DecodeImage", "Resize", "Rescale", "Normalize", "PatchImage"]
    assert ops[1]["attrs"] == {"smart_resize": 1, "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
                               "merge_size": 2, "interpolation": "CUBIC"}  # fmt: skip
    assert ops[4]["attrs"] == {"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    qwen3 = [t["operation"] for t in qwen_processor_config(QWEN3_VL)["processor"]["transforms"]]
    assert qwen3[1]["attrs"]["min_pixels"] == 65536 and qwen3[1]["attrs"]["max_pixels"] == 16777216
    assert qwen3[3]["attrs"] == {"mean": [0.5] * 3, "std": [0.5] * 3}
    with pytest.raises(InputError, match="temporal_patch_size"):
        qwen_processor_config({**PREPROCESSOR, "temporal_patch_size": 3})


def _genai_pixels(package: Path, paths: list[str]) -> dict[str, np.ndarray]:
    _, inputs = genai_inputs(package, " ".join([MARKER] * len(paths)), paths)
    return {name: np.asarray(inputs[name].as_numpy()) for name in ("pixel_values", "image_grid_thw")}


def _pixel_error(package: Path, paths: list[str], pre: dict | None = None) -> float:
    """Max |genai - HF| over every image's patch rows. genai 0.18 pads each image's rows with
    zeros to the largest image's count (rows [N * max_patches, D]); HF packs them back to back."""
    ours, ref = _genai_pixels(package, paths), hf_pixels(paths, pre)
    np.testing.assert_array_equal(ours["image_grid_thw"], ref["image_grid_thw"])
    counts = ref["image_grid_thw"].prod(axis=1)
    width = ref["pixel_values"].shape[1]
    padded = ours["pixel_values"].reshape(len(paths), -1, width)
    assert padded.shape[1] == counts.max()
    starts = np.concatenate([[0], np.cumsum(counts)])
    errors = []
    for i, count in enumerate(counts):
        assert not padded[i, count:].any(), "padding rows are zeros"
        errors.append(np.abs(padded[i, :count] - ref["pixel_values"][starts[i] : starts[i + 1]]).max())
    return float(max(errors))


@pytest.mark.parametrize("case", [["fits"], ["upscaled"], ["resized"], ["fits", "second"]], ids="+".join)
def test_genai_pixels_match_hf(package, images, case):
    assert _pixel_error(package, [images[c] for c in case]) < 1e-6  # measured 4.8e-7


def _with_processor(package: Path, out: Path, pre: dict, **vision: int) -> Path:
    shutil.copytree(package, out)
    (out / "processor_config.json").write_text(json.dumps(qwen_processor_config(pre)))
    genai = json.loads((out / "genai_config.json").read_text())
    genai["model"]["vision"].update(vision)
    (out / "genai_config.json").write_text(json.dumps(genai))
    return out


def test_genai_pixels_match_hf_qwen3_values(package, images, tmp_path):
    """Patch 16 and mean/std 0.5; min_pixels lowered so that the small images are not all upscaled."""
    pre = {**QWEN3_VL, "size": {"shortest_edge": 1024, "longest_edge": 16777216}}
    variant = _with_processor(package, tmp_path / "qwen3", pre, patch_size=16)
    assert _pixel_error(variant, [images["second"], images["resized"]], pre) < 1e-6


def test_convert_rgb_mutant_breaks_pixels(package, images, tmp_path):
    """ConvertRGB after DecodeImage (as genai's own test config has it) reverses the channels."""
    variant = _with_processor(package, tmp_path / "bgr", PREPROCESSOR)
    config = json.loads((variant / "processor_config.json").read_text())
    convert = {"operation": {"name": "convert_to_rgb", "type": "ConvertRGB", "attrs": {}}}
    config["processor"]["transforms"].insert(1, convert)
    (variant / "processor_config.json").write_text(json.dumps(config))
    assert _pixel_error(variant, [images["fits"]]) > 0.1


def test_resize_differences_pinned(package, images):
    """Where genai's resize and HF's part (pinned so that a runtime change shows here): a side at
    k + 0.5 units of patch·merge rounds half up in genai (70 px -> 84), to even in HF's Python
    round() (70 px -> 56); and an image resized wider but shorter (80 x 62 -> 84 x 56) gets the
    same grid but pixels up to ~0.28 apart (narrower-taller, both-up, both-down and one-side
    resizes agree within 1e-6)."""
    ours, ref = _genai_pixels(package, [images["half_way"]]), hf_pixels([images["half_way"]])
    assert ours["image_grid_thw"].tolist() == [[1, 6, 8]] and ref["image_grid_thw"].tolist() == [[1, 4, 8]]
    assert _pixel_error(package, [images["wider_shorter"]]) > 0.1


PROMPTS = {
    "one": ("hi " + MARKER + " tell", ["fits"]),
    "resized": ("look " + MARKER + " ok", ["resized"]),
    "two": ("x " + MARKER + " and " + MARKER + " y", ["fits", "second"]),
    "same_size": ("a " + MARKER + MARKER + " b", ["fits", "fits_again"]),  # one grid: genai's batched call
    "text": ("just text here", []),
}


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    import transformers as tf

    return tf.Qwen2_5_VLForConditionalGeneration.from_pretrained(checkpoint).eval()


@pytest.mark.parametrize("attention", ["gqa", "bias"])
def test_genai_greedy_equals_hf_generate(checkpoint, package, images, hf, attention, tmp_path):
    """Prompt logits within 1e-4 (measured <= 1e-6) and 20 greedy tokens equal, per prompt: one
    image that fits, one resized, two of different grids (genai's per-image loop), two of one
    grid, and text only (no image: every placeholder-free token embeds as a token)."""
    pkg = package if attention == "gqa" else assemble(checkpoint, tmp_path / attention, attention)
    got = []
    for name, (prompt, used) in PROMPTS.items():
        paths = [images[u] for u in used]
        ids, logits, tokens = genai_greedy(pkg, prompt, paths, NEW)
        ref_logits, ref_tokens = hf_greedy(hf, ids, paths, NEW)
        assert np.abs(logits - ref_logits).max() < 1e-4, name
        assert tokens == ref_tokens, name
        got.append(tokens)
    assert_varied(got)


def test_vision_window_mutant_breaks_logits(checkpoint, images, hf, tmp_path):
    """The same package with 2 x 2-block windows in the vision tower: prompt logits move past
    1e-3."""
    pkg = assemble(checkpoint, tmp_path / "mutant", window_size=56)
    prompt, used = PROMPTS["two"]
    paths = [images[u] for u in used]
    ids, logits, _ = genai_greedy(pkg, prompt, paths, 2)
    assert np.abs(logits - hf_greedy(hf, ids, paths, 2)[0]).max() > 1e-3
