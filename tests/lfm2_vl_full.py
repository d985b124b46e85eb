"""The tiny full-package LFM2-VL (docs/multimodal.md §14): a SigLIP2 NaFlex tower with 4-pixel
patches and a 4 x 4 learned position grid, pixel-unshuffle 2 x 2 + LayerNorm MLP projector, and
LFM2's short-convolution + GQA decoder; PNG images, genai's MultiModalProcessor + greedy
generation, HF's generate and get_image_features."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from reference import genai_media_greedy

# the fixture tokenizer's <image>, <|image_start|>, <|image_end|> (genai's lfm2_vl processor looks them up)
IMAGE_TOKENS = ("<image>", "<|image_start|>", "<|image_end|>")
IMAGE, IMAGE_START, IMAGE_END = 6, 7, 8
PATCH, FACTOR = 4, 2
MIN_TOKENS, MAX_TOKENS = 4, 16  # images of 4·64 to 16·64 pixels; max_num_patches = 16·4 = 64
NEW = 20
# height x width. "same": multiples of patch·factor within the token budget, resized by neither
# processor; "wide": over the budget, scaled down; "flat": a 2 x 8 patch grid (the 4 x 4 position
# table shrinks along the rows, with antialiasing, and grows along the columns)
SIZES = {"same": (24, 40), "same_b": (24, 40), "wide": (30, 50), "flat": (8, 32)}


def save_lfm2_vl(out_dir: Path, seed: int = 0) -> Path:
    """A tiny random Lfm2VlForConditionalGeneration with its tokenizer and image processor config."""
    import torch
    import transformers as tf
    from tiny_models import BASE, randomize_norms, save_tokenizer

    text = {k: BASE[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                                 "num_key_value_heads", "bos_token_id", "eos_token_id", "pad_token_id",
                                 "initializer_range")}  # fmt: skip
    text.update(
        model_type="lfm2",
        max_position_embeddings=512,
        num_hidden_layers=3,
        layer_types=["conv", "full_attention", "conv"],
        conv_L_cache=3,
        conv_bias=False,
        norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )
    vision = dict(model_type="siglip2_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, patch_size=PATCH, num_patches=16, vision_use_head=False,
                  hidden_act="gelu_pytorch_tanh", initializer_range=0.2)  # fmt: skip
    config = tf.Lfm2VlConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, downsample_factor=FACTOR,
                             projector_hidden_size=48, projector_hidden_act="gelu")  # fmt: skip
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, text[key])
    torch.manual_seed(seed)
    model = tf.Lfm2VlForConditionalGeneration(config).eval()
    randomize_norms(model, biases=True)
    with torch.no_grad():  # a spread position table: a wrong interpolation moves the features
        model.model.vision_tower.embeddings.position_embedding.weight.normal_(0.0, 1.0)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir)
    save_tokenizer(out_dir, vocab_size=text["vocab_size"], extra_specials=IMAGE_TOKENS)
    pre = {"image_processor_type": "Lfm2VlImageProcessor", "encoder_patch_size": PATCH,
           "downsample_factor": FACTOR, "min_image_tokens": MIN_TOKENS, "max_image_tokens": MAX_TOKENS,
           "do_image_splitting": False, "resample": 2, "rescale_factor": 1 / 255,
           "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "max_num_patches": MAX_TOKENS * 4,
           "size": {"height": 32, "width": 32}, "tile_size": 32}  # fmt: skip
    (out_dir / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    return out_dir


def save_images(folder: Path) -> dict[str, Path]:
    from PIL import Image

    rng = np.random.default_rng(3)
    made = {}
    for name, (h, w) in SIZES.items():
        made[name] = folder / f"{name}.png"
        # smooth-ish content: random noise resized differently by two bilinear codes is all rounding
        base = rng.integers(0, 256, (max(h // 4, 2), max(w // 4, 2), 3), dtype=np.uint8)
        Image.fromarray(base).resize((w, h), Image.BILINEAR).save(made[name])
    return made


def genai_generate(model: Any, prompt: str, files: list[Path]) -> tuple[dict[str, np.ndarray], list[int]]:
    """genai's MultiModalProcessor on (prompt, PNGs), then NEW greedy tokens (EOS suppressed)."""
    names = ("pixel_values", "image_attention_mask", "image_sizes") if files else ()
    return genai_media_greedy(model, prompt, NEW, names, files)


def hf_generate(hf: Any, arrays: dict[str, np.ndarray]) -> list[int]:
    import torch

    ids = torch.from_numpy(arrays["input_ids"].astype(np.int64))
    extra = {}
    if "pixel_values" in arrays:
        extra = {
            "pixel_values": torch.from_numpy(arrays["pixel_values"]),
            "pixel_attention_mask": torch.from_numpy(arrays["image_attention_mask"].astype(np.int64)),
            "spatial_shapes": torch.from_numpy(arrays["image_sizes"].astype(np.int64)),
        }
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW, **extra)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def hf_image_features(hf: Any, pixels: np.ndarray, mask: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = hf.model.get_image_features(
            torch.from_numpy(pixels), torch.from_numpy(shapes.astype(np.int64)), torch.from_numpy(mask.astype(np.int64))
        )
    return torch.cat(out.pooler_output).numpy()


def patch_inputs(sizes: list[tuple[int, int]], seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random patches of images of `sizes` (pixels), padded to max_num_patches as HF's processor
    pads them: pixel_values [N, 64, 3·p·p], pixel_attention_mask [N, 64], spatial_shapes [N, 2]."""
    rng = np.random.default_rng(seed)
    longest = MAX_TOKENS * FACTOR * FACTOR
    pixels = np.zeros((len(sizes), longest, 3 * PATCH * PATCH), np.float32)
    mask = np.zeros((len(sizes), longest), np.int64)
    shapes = np.array([(h // PATCH, w // PATCH) for h, w in sizes], np.int64)
    for i, (rows, cols) in enumerate(shapes):
        pixels[i, : rows * cols] = rng.uniform(-1, 1, (rows * cols, 3 * PATCH * PATCH))
        mask[i, : rows * cols] = 1
    return pixels, mask, shapes
