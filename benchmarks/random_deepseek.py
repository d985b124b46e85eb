"""Write a random-weight DeepSeek-V3-shaped checkpoint without torch (numpy + safetensors).

    python benchmarks/random_deepseek.py OUT --shape deepseek_v3-1g|tiny [--dtype bf16|fp16|fp32]

DeepSeek-V3's mixture at its real expert count on a reduced width, laid out as the hub release
is: `DeepseekV3ForCausalLM`, multi-head latent attention with q-LoRA (`q_a_proj`, `q_a_layernorm`,
`q_b_proj`, `kv_a_proj_with_mqa`, `kv_a_layernorm`, `kv_b_proj`, `o_proj`), dense MLPs on the first
`first_k_dense_replace` layers, then on every layer 256 routed experts stored one by one
(`mlp.experts.{e}.{gate,up,down}_proj.weight`), top 8 chosen within the 4 best of 8 groups by a
sigmoid router (`mlp.gate.weight`) with its fp32 `e_score_correction_bias`, beside 1 shared expert;
untied embedding and lm_head. One shard per layer (plus one for embedding / head / final norm), so
writing it needs about one layer's shard of RAM. Weights N(0, 0.02), norms 1, bias N(0, 0.01).

Shapes:
- deepseek_v3-1g: hidden 512, 16 layers (3 dense, 13 MoE), 8 heads (q-LoRA 192, kv-LoRA 128, key
  64 no-rope + 32 rope dims, values 64), 256 experts of width 128 top-8 (8 groups, 4 kept), 1 shared,
  dense width 1536, vocab 32000: ~0.71 B parameters (~1.4 GB in bf16), 92 % of them routed experts;
  each MoE layer's experts ~100 MB in bf16 (DeepSeek-V3's own: ~22 GB a layer over 58 MoE layers).
- tiny: hidden 64, 3 layers (1 dense), 4 heads, 16 experts top-4 (4 groups, 2 kept), vocab 384.

The tokenizer is the tests' tiny BPE (vocab 384; bos 0 / eos 1 / pad 5).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from random_llama import write_shards

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}  # fmt: skip
SHAPES: dict[str, dict[str, Any]] = {
    "deepseek_v3-1g": dict(hidden_size=512, num_hidden_layers=16, first_k_dense_replace=3, intermediate_size=1536,
                           num_attention_heads=8, num_key_value_heads=8, q_lora_rank=192, kv_lora_rank=128,
                           qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=256,
                           num_experts_per_tok=8, n_group=8, topk_group=4, moe_intermediate_size=128,
                           n_shared_experts=1, vocab_size=32000, max_position_embeddings=163840,
                           rope_parameters=_YARN),
    "tiny": dict(hidden_size=64, num_hidden_layers=3, first_k_dense_replace=1, intermediate_size=96,
                 num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
                 qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=16, num_experts_per_tok=4, n_group=4,
                 topk_group=2, moe_intermediate_size=32, n_shared_experts=1, vocab_size=384,
                 max_position_embeddings=1024,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}  # fmt: skip
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
STD = 0.02


def tensors(cfg: dict[str, Any], rng: np.random.Generator, dtype: Any) -> Iterator[dict[str, np.ndarray]]:
    """One shard's tensors at a time (embedding + head first, then one shard per layer)."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    key = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    experts, width = cfg["n_routed_experts"], cfg["moe_intermediate_size"]

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * STD).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype)

    def mlp(prefix: str, inner: int) -> dict[str, np.ndarray]:
        return {prefix + "gate_proj.weight": w(inner, h), prefix + "up_proj.weight": w(inner, h),
                prefix + "down_proj.weight": w(h, inner)}  # fmt: skip

    yield {"model.embed_tokens.weight": w(cfg["vocab_size"], h), "lm_head.weight": w(cfg["vocab_size"], h),
           "model.norm.weight": ones(h)}  # fmt: skip
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        shard = {
            p + "input_layernorm.weight": ones(h), p + "post_attention_layernorm.weight": ones(h),
            a + "q_a_proj.weight": w(cfg["q_lora_rank"], h), a + "q_a_layernorm.weight": ones(cfg["q_lora_rank"]),
            a + "q_b_proj.weight": w(heads * key, cfg["q_lora_rank"]),
            a + "kv_a_proj_with_mqa.weight": w(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h),
            a + "kv_a_layernorm.weight": ones(cfg["kv_lora_rank"]),
            a + "kv_b_proj.weight": w(heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]),
            a + "o_proj.weight": w(h, heads * cfg["v_head_dim"]),
        }  # fmt: skip
        if layer < cfg["first_k_dense_replace"]:
            shard.update(mlp(p + "mlp.", cfg["intermediate_size"]))
        else:
            shard[p + "mlp.gate.weight"] = w(experts, h)
            shard[p + "mlp.gate.e_score_correction_bias"] = rng.standard_normal(experts, dtype=np.float32) * 0.01
            for e in range(experts):
                shard.update(mlp(p + f"mlp.experts.{e}.", width))
            shard.update(mlp(p + "mlp.shared_experts.", width * cfg["n_shared_experts"]))
        yield shard


def write(out: Path, shape: str, dtype: str = "bf16", seed: int = 0) -> Path:
    from tiny_models import save_tokenizer
    from transformers import DeepseekV3Config

    cfg = SHAPES[shape]
    out.mkdir(parents=True, exist_ok=True)
    torch_dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    config = DeepseekV3Config(
        **cfg,
        architectures=["DeepseekV3ForCausalLM"],
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        tie_word_embeddings=False,
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
    parser.add_argument("--shape", choices=SHAPES, default="deepseek_v3-1g")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype)
