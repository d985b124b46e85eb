"""The tiny full-package Gemma-3 (tests/multimodal_models.py `gemma3_full`) as the multimodal
package tests use it: its image ids, PNG images, genai's MultiModalProcessor + greedy generation
and HF's generate and image processor on the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from reference import genai_media_greedy

IMAGE, BOI, EOI = 6, 7, 8  # the fixture tokenizer's <image_soft_token>, <start_of_image>, <end_of_image>
IMAGE_TOKENS = 256
NEW = 20


def save_images(folder: Path) -> dict[str, Path]:
    """Random RGB PNGs: 48x80 (resized to the tower's 64x64) and 64x64 (no resize)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    made = {}
    for name, (h, w) in {"resized": (48, 80), "exact": (64, 64)}.items():
        made[name] = folder / f"{name}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(made[name])
    return made


def genai_generate(package: Path, prompt: str, files: list[Path]) -> tuple[np.ndarray, np.ndarray | None, list[int]]:
    """genai's MultiModalProcessor on (prompt, PNGs), then NEW greedy tokens (EOS suppressed)."""
    arrays, tokens = genai_media_greedy(package, prompt, NEW, ("pixel_values",) if files else (), files)
    return arrays["input_ids"].astype(np.int64), arrays.get("pixel_values"), tokens


def hf_generate(hf, ids: np.ndarray, pixels: np.ndarray | None) -> list[int]:
    import torch

    extra = {}
    if pixels is not None:
        extra = {"pixel_values": torch.from_numpy(pixels), "token_type_ids": torch.from_numpy((ids == IMAGE) * 1)}
    with torch.no_grad():
        out = hf.generate(
            torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long), do_sample=False,
            max_new_tokens=NEW, min_new_tokens=NEW, **extra,
        )  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def hf_pixels(files: list[Path]) -> np.ndarray:
    from PIL import Image
    from transformers import Gemma3ImageProcessorPil

    processor = Gemma3ImageProcessorPil(size={"height": 64, "width": 64})
    return processor([Image.open(f) for f in files], return_tensors="np")["pixel_values"]
