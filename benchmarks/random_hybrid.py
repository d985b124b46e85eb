"""Write a random-weight hybrid checkpoint (Qwen3.5's gated DeltaNet + gated attention, or LFM2's
short convolutions + attention).

    python benchmarks/random_hybrid.py OUT [--shape qwen3_5-230m|lfm2-350m] [--dtype bf16|fp16|fp32]

The tensor names and shapes come from transformers' own `Qwen3_5ForCausalLM` built on the meta
device (no memory); the values are drawn with numpy, N(0, 0.02) for matrices and the conv kernels,
zeros for the (1 + w) norms, ones for the DeltaNet's output norm, A_log and dt_bias as HF
initialises them (log of U(0, 16), ones), and written one shard per layer, as
benchmarks/random_llama.py does, so writing it needs about one layer's RAM.

Shapes:
- qwen3_5-230m: hidden 1024, 12 layers (every 4th full attention: 8 q / 2 kv heads x 128, partial
  rotary 0.25), DeltaNet 8 key heads / 16 value heads x 64, conv kernel 4, MLP 3072, vocab 32000,
  untied: 228 M parameters, 435 MiB in bf16.
- lfm2-350m: LiquidAI/LFM2-350M's published shape: hidden 1024, 16 layers (attention at 2, 5, 8, 10,
  12, 14: 16 q / 8 kv heads x 64; short convolutions of kernel 3 elsewhere), MLP 6656 auto-adjusted
  to 4608, vocab 65536, tied (norms are plain RMSNorm weights: ones). One the official builder
  exports too (its Lfm2ForCausalLM), unlike Qwen3.5.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from random_llama import DTYPES, write_shards

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

SHAPES = {
    "qwen3_5-230m": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=8,
                         num_key_value_heads=2, head_dim=128, vocab_size=32000, tie_word_embeddings=False,
                         linear_conv_kernel_dim=4, linear_num_key_heads=8, linear_num_value_heads=16,
                         linear_key_head_dim=64, linear_value_head_dim=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                          "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                          "mrope_interleaved": True}),
    "lfm2-350m": dict(hidden_size=1024, intermediate_size=6656, num_hidden_layers=16, num_attention_heads=16,
                      num_key_value_heads=8, vocab_size=65536, tie_word_embeddings=True,
                      layer_types=["conv" if i not in (2, 5, 8, 10, 12, 14) else "full_attention" for i in range(16)]),
}  # fmt: skip
# shape -> (config class, model class, stored 1-D norm weights: 0 for Qwen3.5's (1 + w), 1 for LFM2's)
CLASSES = {
    "qwen3_5-230m": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", 0.0),
    "lfm2-350m": ("Lfm2Config", "Lfm2ForCausalLM", 1.0),
}


def _value(name: str, shape: tuple[int, ...], rng: np.random.Generator, norm: float = 0.0) -> np.ndarray:
    if name.endswith("A_log"):
        return np.log(rng.uniform(1e-3, 16, shape)).astype(np.float32)
    if name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
        return np.ones(shape, np.float32)
    if len(shape) == 1:  # RMSNorms: Qwen3.5's (1 + w) stored w = 0, LFM2's w = 1
        return np.full(shape, norm, np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * 0.02


def write(out: Path, shape: str, dtype: str, seed: int = 0) -> Path:
    import torch
    import transformers
    from tiny_models import save_tokenizer

    config_class, model_class, norm = CLASSES[shape]
    config = getattr(transformers, config_class)(
        **SHAPES[shape], bos_token_id=0, eos_token_id=1, pad_token_id=5, max_position_embeddings=4096,
        dtype={"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype],
    )  # fmt: skip
    config.architectures = [model_class]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in getattr(transformers, model_class)(config).state_dict().items()}
    shards: dict[str, list[str]] = {}
    for name in shapes:
        layer = name.split(".")[2] if name.startswith("model.layers.") else "top"
        shards.setdefault(layer, []).append(name)
    rng = np.random.default_rng(seed)
    made = (
        {name: _value(name, shapes[name], rng, norm).astype(DTYPES[dtype]) for name in names}
        for names in shards.values()
    )
    write_shards(out, made, len(shards))
    save_tokenizer(out, vocab_size=384)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=SHAPES, default="qwen3_5-230m")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype)
