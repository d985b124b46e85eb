"""The tiny full-package Gemma-3 (tests/multimodal_models.py `gemma3_full`) as the multimodal
package tests use it: its image ids, PNG images, genai's MultiModalProcessor + greedy generation
and HF's generate and image processor on the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    import onnxruntime_genai as og

    model = og.Model(str(package))
    inputs = model.create_multimodal_processor()(prompt, images=og.Images.open(*map(str, files)) if files else None)
    ids = inputs["input_ids"].as_numpy().astype(np.int64)
    pixels = inputs["pixel_values"].as_numpy() if files else None
    params = og.GeneratorParams(model)
    length = ids.shape[1] + NEW
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return ids, pixels, tokens


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
