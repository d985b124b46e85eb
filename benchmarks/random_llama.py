"""Write a random-weight Llama checkpoint of a chosen shape without torch (numpy + safetensors).

    python benchmarks/random_llama.py OUT --shape 150m|1b|8b [--dtype bf16|fp16|fp32]

Weights are drawn per tensor and written shard by shard, so even the 1B shape needs little RAM.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

SHAPES = {
    # ~150M parameters (untied)
    "150m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=False),
    # Llama-3.2-1B's shapes (tied embeddings, 128k vocab)
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True,
               rope_parameters={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                                "rope_theta": 500000.0}),
    # Llama-3.1-8B's shapes (untied, 128k vocab): ~16 GB in bf16, never committed
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
               rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                                "rope_theta": 500000.0}),
}  # fmt: skip
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}


def tensors(cfg: dict, rng: np.random.Generator, dtype) -> Iterator[dict[str, np.ndarray]]:
    """One shard's tensors at a time (embedding + head first, then one shard per layer)."""
    h, i, heads, kv = (
        cfg["hidden_size"],
        cfg["intermediate_size"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
    )
    d = h // heads
    std = 0.02

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dtype)

    first = {"model.embed_tokens.weight": w(cfg["vocab_size"], h), "model.norm.weight": np.ones(h, dtype)}
    if not cfg["tie_word_embeddings"]:
        first["lm_head.weight"] = w(cfg["vocab_size"], h)
    yield first
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        yield {
            p + "self_attn.q_proj.weight": w(heads * d, h), p + "self_attn.k_proj.weight": w(kv * d, h),
            p + "self_attn.v_proj.weight": w(kv * d, h), p + "self_attn.o_proj.weight": w(h, heads * d),
            p + "mlp.gate_proj.weight": w(i, h), p + "mlp.up_proj.weight": w(i, h), p + "mlp.down_proj.weight": w(h, i),
            p + "input_layernorm.weight": np.ones(h, dtype), p + "post_attention_layernorm.weight": np.ones(h, dtype),
        }  # fmt: skip


def write_shards(out: Path, shards: Iterable[dict[str, np.ndarray]], count: int) -> None:
    """Each dict as model-0000N-of-0000M.safetensors (made one at a time: a generator keeps one
    shard in memory), and the index naming each tensor's file."""
    weight_map: dict[str, str] = {}
    for n, shard in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{count:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
        del shard  # before the generator makes the next one
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def write(out: Path, shape: str, dtype: str, seed: int = 0, max_positions: int | None = None) -> Path:
    from tiny_models import save_tokenizer
    from transformers import LlamaConfig

    cfg = SHAPES[shape]
    out.mkdir(parents=True, exist_ok=True)
    torch_dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    config = LlamaConfig(
        **cfg,
        architectures=["LlamaForCausalLM"],
        max_position_embeddings=max_positions or (131072 if shape in ("1b", "8b") else 4096),
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=5,
        dtype=torch_dtype,
    )
    config.save_pretrained(out)
    rng = np.random.default_rng(seed)
    write_shards(out, tensors(cfg, rng, DTYPES[dtype]), cfg["num_hidden_layers"] + 1)
    save_tokenizer(out, vocab_size=384)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=SHAPES, default="150m")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument(
        "--max-positions",
        type=int,
        help="max_position_embeddings (default 131072 for 1b/8b, else 4096)",
    )
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype, max_positions=args.max_positions)
