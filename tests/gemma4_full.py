"""The tiny full-package Gemma-4 (tests/gemma4_models.py form "full") as the Gemma-4 package tests
use it: PNG images, HF's image processor, genai's MultiModalProcessor + greedy generation, HF
generate, the vision graph's features and their distance from HF's (docs/multimodal.md §13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
from gemma4_models import FULL_PROCESSOR
from reference import genai_media_greedy

from gqa_export.graph.encoders import axial_vit
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

NEW = 20
MAX_PATCHES = FULL_PROCESSOR["max_soft_tokens"] * FULL_PROCESSOR["pooling_kernel_size"] ** 2

# BOS, text, an image block as genai expands <|image|> (70 soft tokens of the 84 x 120 image), text
BLOCK = [6, *[7] * 70, 8]
IMAGE_PROMPT = [0, 17, 45, 99, *BLOCK, 200, 3, 64, 12]


def save_images(folder: Path) -> dict[str, Path]:
    """exact: 84 x 120 random pixels, 630 patches (no resize); resized: a smooth 48 x 64 gradient
    (bicubic up to 84 x 108: genai and PIL then differ by about 1/255)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:48, 0:64]
    smooth = np.stack([xx * 200 // 64 + 20, yy * 200 // 48 + 20, (xx + yy) * 100 // 112 + 60], -1)
    arrays = {"exact": rng.integers(0, 256, (84, 120, 3), dtype=np.uint8), "resized": smooth.astype(np.uint8)}
    made = {}
    for name, array in arrays.items():
        made[name] = folder / f"{name}.png"
        Image.fromarray(array).save(made[name])
    return made


def hf_pixels(files: list[Path]) -> dict[str, Any]:
    from PIL import Image
    from transformers import Gemma4ImageProcessorPil

    out = Gemma4ImageProcessorPil(**FULL_PROCESSOR)([Image.open(f) for f in files], return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_position_ids": out["image_position_ids"]}


def padded(pixels: np.ndarray, positions: np.ndarray) -> dict[str, Any]:
    """genai's unpadded patches in HF's padded form (zero rows, position -1)."""
    import torch

    n, p, width = pixels.shape
    pv = np.zeros((n, MAX_PATCHES, width), np.float32)
    pos = np.full((n, MAX_PATCHES, 2), -1, np.int64)
    pv[:, :p], pos[:, :p] = pixels, positions
    return {"pixel_values": torch.from_numpy(pv), "image_position_ids": torch.from_numpy(pos)}


def genai_generate(
    package: Path, prompt: str, files: list[Path]
) -> tuple[np.ndarray, dict[str, np.ndarray], list[int]]:
    arrays, tokens = genai_media_greedy(package, prompt, NEW, ("pixel_values", "pixel_position_ids") if files else (),
                                        files)  # fmt: skip
    return arrays.pop("input_ids").astype(np.int64), arrays, tokens


def hf_generate(hf, ids: np.ndarray, pixels: dict[str, Any]) -> list[int]:
    import torch

    ids_t = torch.from_numpy(ids)
    extra = {**pixels, "mm_token_type_ids": (ids_t == hf.config.image_token_id).long()}
    with torch.no_grad():
        out = hf.generate(ids_t, attention_mask=torch.ones_like(ids_t), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW, **extra)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def features(package: Path, pixels: dict[str, Any]) -> np.ndarray:
    import onnxruntime as ort

    keep = (pixels["image_position_ids"][0] != -1).all(-1).numpy()
    feed = {"pixel_values": pixels["pixel_values"][:, keep].numpy(),
            "pixel_position_ids": pixels["image_position_ids"][:, keep].numpy()}  # fmt: skip
    return ort.InferenceSession(str(package / "vision.onnx")).run(None, feed)[0]


def features_hf(hf, pixels: dict[str, Any]) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = hf.model.get_image_features(pixels["pixel_values"], pixels["image_position_ids"], return_dict=True)
    return out.pooler_output[0].numpy()


def vision_error(checkpoint: Path, hf, images: dict[str, Path]) -> float:
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
        pixels = hf_pixels([file])
        with torch.no_grad():
            ref = hf.model.get_image_features(pixels["pixel_values"], pixels["image_position_ids"], return_dict=True)
        keep = (pixels["image_position_ids"][0] != -1).all(-1).numpy()
        feed = {"pixel_values": pixels["pixel_values"][:, keep].numpy(),
                "pixel_position_ids": pixels["image_position_ids"][:, keep].numpy()}  # fmt: skip
        got = session.run(None, feed)[0]
        assert got.shape == ref.pooler_output[0].shape
        worst = max(worst, float(np.abs(got - ref.pooler_output[0].numpy()).max()))
    return worst
