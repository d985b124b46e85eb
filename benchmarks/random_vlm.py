"""Write a random-weight vision-language checkpoint (Qwen3-VL: a realistic vision tower with
deepstack mergers, a small text decoder), for the encoders' export memory.

    python benchmarks/random_vlm.py OUT [--shape qwen3_vl-vit1152] [--dtype bf16|fp16|fp32]

The tensor names and shapes come from transformers' own `Qwen3VLForConditionalGeneration` built on
the meta device (no memory); the values are drawn with numpy, N(0, 0.02) for matrices and the
patch / position tables, ones for the norm weights, zeros for biases, and written one shard per
vision block and per text layer (as benchmarks/random_llama.py does), so writing it needs about
one block's RAM. The tokenizer holds the Qwen vision tokens and preprocessor_config.json is
Qwen3-VL's, so `gqa-export build` writes the full package (vision.onnx, embedding.onnx, decoder).

Shapes:
- qwen3_vl-vit1152: Qwen3-VL-8B's vision tower (width 1152, 27 blocks, 16 heads, MLP 4304, patch
  16, 48 x 48 position table, deepstack mergers after blocks 8, 16 and 24) in front of a text
  decoder of hidden 1024 (8 layers, 16 q / 8 kv heads x 128, MLP 3072, vocab 32000, untied):
  0.52 B vision parameters (0.10 B of them the main and three deepstack mergers) + 0.19 B text,
  1356 MiB in bf16.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from random_llama import DTYPES, write_shards

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

SHAPES = {
    "qwen3_vl-vit1152": (
        dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=1024, patch_size=16,
             spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
             hidden_act="gelu_pytorch_tanh", deepstack_visual_indexes=[8, 16, 24]),
        dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128, vocab_size=32000, max_position_embeddings=4096,
             rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                              "mrope_interleaved": True}),
    ),
}  # fmt: skip
IMAGE, VIDEO, VISION_START, VISION_END = 384, 385, 386, 387  # after the tokenizer's 384 BPE ids
PREPROCESSOR = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
                "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                "image_processor_type": "Qwen2VLImageProcessor"}  # fmt: skip


def _value(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 1:  # norm weights: ones; biases: zeros
        return np.ones(shape, np.float32) if "norm" in name else np.zeros(shape, np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * 0.02


def _shard(name: str) -> str:
    for prefix in ("model.visual.blocks.", "model.language_model.layers."):
        if name.startswith(prefix):
            return prefix + name[len(prefix) :].split(".")[0]
    return "top"


def write(out: Path, shape: str, dtype: str, seed: int = 0) -> Path:
    import torch
    from tiny_models import save_tokenizer
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    vision, text = SHAPES[shape]
    config = Qwen3VLConfig(
        text_config={**text, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 5}, vision_config=vision,
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False,
    )  # fmt: skip
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in Qwen3VLForConditionalGeneration(config).state_dict().items()}
    shards: dict[str, list[str]] = {}
    for name in shapes:
        shards.setdefault(_shard(name), []).append(name)
    rng = np.random.default_rng(seed)
    made = (
        {name: _value(name, shapes[name], rng).astype(DTYPES[dtype]) for name in names} for names in shards.values()
    )
    write_shards(out, made, len(shards))
    tokenizer = save_tokenizer(out, vocab_size=384)
    specials = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.save_pretrained(out)
    assert tokenizer.convert_tokens_to_ids(specials) == [IMAGE, VIDEO, VISION_START, VISION_END]
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=SHAPES, default="qwen3_vl-vit1152")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype)
