"""Write a random-weight hybrid checkpoint (Qwen3.5 text decoder: gated DeltaNet + gated attention).

    python benchmarks/random_hybrid.py OUT [--shape qwen3_5-230m] [--dtype bf16|fp16|fp32]

The tensor names and shapes come from transformers' own `Qwen3_5ForCausalLM` built on the meta
device (no memory); the values are drawn with numpy, N(0, 0.02) for matrices and the conv kernels,
zeros for the (1 + w) norms, ones for the DeltaNet's output norm, A_log and dt_bias as HF
initialises them (log of U(0, 16), ones), and written one shard per layer, as
benchmarks/random_llama.py does, so writing it needs about one layer's RAM.

Shapes:
- qwen3_5-230m: hidden 1024, 12 layers (every 4th full attention: 8 q / 2 kv heads x 128, partial
  rotary 0.25), DeltaNet 8 key heads / 16 value heads x 64, conv kernel 4, MLP 3072, vocab 32000,
  untied: 228 M parameters, 435 MiB in bf16.
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
}  # fmt: skip


def _value(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name.endswith("A_log"):
        return np.log(rng.uniform(1e-3, 16, shape)).astype(np.float32)
    if name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
        return np.ones(shape, np.float32)
    if len(shape) == 1:  # the (1 + w) RMSNorms: stored w = 0
        return np.zeros(shape, np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * 0.02


def write(out: Path, shape: str, dtype: str, seed: int = 0) -> Path:
    import torch
    from tiny_models import save_tokenizer
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        **SHAPES[shape], bos_token_id=0, eos_token_id=1, pad_token_id=5, max_position_embeddings=4096,
        dtype={"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype],
    )  # fmt: skip
    config.architectures = ["Qwen3_5ForCausalLM"]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    with torch.device("meta"):
        shapes = {name: tuple(t.shape) for name, t in Qwen3_5ForCausalLM(config).state_dict().items()}
    shards: dict[str, list[str]] = {}
    for name in shapes:
        layer = name.split(".")[2] if name.startswith("model.layers.") else "top"
        shards.setdefault(layer, []).append(name)
    rng = np.random.default_rng(seed)
    made = (
        {name: _value(name, shapes[name], rng).astype(DTYPES[dtype]) for name in names} for names in shards.values()
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
