"""The tiny full-package Mistral-3 (tests/multimodal_models.py `mistral3_full`: Pixtral with
4-pixel patches merged 2 x 2, a 64-pixel longest edge) as its package tests use it: PNG images,
genai's MultiModalProcessor + greedy generation, HF's generate and image processor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from reference import genai_media_greedy, genai_media_inputs

IMG, IMG_BREAK, IMG_END = 6, 7, 8  # the fixture tokenizer's [IMG], [IMG_BREAK], [IMG_END]
NEW = 24
# height x width: multiples of patch·merge (8) inside the 64-pixel edge, so neither HF nor genai
# resizes them; "wide" needs a resize, where the two processors part (docs/multimodal.md §12)
SIZES = {"grid4x6": (32, 48), "grid4x6b": (32, 48), "grid2x3": (16, 24), "grid6x4": (48, 32), "wide": (40, 100)}


def save_images(folder: Path) -> dict[str, Path]:
    from PIL import Image

    rng = np.random.default_rng(3)
    made = {}
    for name, (h, w) in SIZES.items():
        made[name] = folder / f"{name}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(made[name])
    return made


def genai_process(package: Path, prompt: str, files: list[Path]) -> dict[str, np.ndarray]:
    """genai's MultiModalProcessor on (prompt, PNGs): input_ids, pixel_values, image_sizes."""
    return genai_media_inputs(package, prompt, ("pixel_values", "image_sizes") if files else (), files)[1]


def genai_generate(package: Path, prompt: str, files: list[Path]) -> tuple[dict[str, np.ndarray], list[int]]:
    """genai's MultiModalProcessor on (prompt, PNGs), then NEW greedy tokens (EOS suppressed)."""
    return genai_media_greedy(package, prompt, NEW, ("pixel_values", "image_sizes") if files else (), files)


def hf_generate(hf: Any, arrays: dict[str, np.ndarray]) -> list[int]:
    import torch

    ids = torch.from_numpy(arrays["input_ids"].astype(np.int64))
    extra = {}
    if "pixel_values" in arrays:
        extra = {"pixel_values": torch.from_numpy(arrays["pixel_values"]),
                 "image_sizes": torch.from_numpy(arrays["image_sizes"])}  # fmt: skip
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW, **extra)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def hf_pixels(files: list[Path]) -> dict[str, np.ndarray]:
    from PIL import Image
    from transformers import PixtralImageProcessorPil

    processor = PixtralImageProcessorPil(patch_size={"height": 4, "width": 4}, size={"longest_edge": 64})
    out = processor([Image.open(f) for f in files], return_tensors="np")
    return {"pixel_values": out["pixel_values"], "image_sizes": np.asarray(out["image_sizes"])}


def hf_image_features(hf: Any, pixels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        feats = hf.model.get_image_features(torch.from_numpy(pixels), image_sizes=torch.from_numpy(sizes))
    return torch.cat(feats.pooler_output).numpy()


def image_block(rows: int, cols: int) -> list[int]:
    """The ids genai's (and HF's Pixtral) processor writes for one image: rows of [IMG] x cols
    ended by [IMG_BREAK], the last by [IMG_END]."""
    block = ([IMG] * cols + [IMG_BREAK]) * rows
    return [*block[:-1], IMG_END]
