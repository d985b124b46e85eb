"""Write a random-weight gpt-oss-shaped checkpoint with MXFP4 experts, without torch (numpy + safetensors).

    python benchmarks/random_moe.py OUT [--shape gpt-oss-2g|tiny] [--dense OUT_DENSE] [--seed 0]

The checkpoint is laid out like the openai/gpt-oss-* releases: a `GptOssForCausalLM` whose experts are
MXFP4 (`mlp.experts.{gate_up,down}_proj_blocks` uint8 [E, N, K/32, 16] and `_scales` uint8 e8m0
[E, N, K/32], out x in, gate/up rows interleaved), every other tensor bf16: q/k/v/o with biases,
`self_attn.sinks` [heads], `mlp.router.{weight,bias}`, `mlp.experts.{gate_up,down}_proj_bias`, norms,
untied embedding and lm_head. config.json comes from transformers' GptOssConfig (release defaults:
alternating sliding/full layers starting with sliding, window 128, YaRN factor 32 over 4096, swiglu
limit 7) with the release's `quantization_config` {"quant_method": "mxfp4", "modules_to_not_convert":
[...]}. The official ORT GenAI builder (0.18) reads gpt-oss experts only from these `_blocks`/`_scales`
tensors, so a bf16-expert checkpoint would not do.

Expert weights are drawn N(0, 0.02) one expert at a time in float32 and quantized to MXFP4 with
numpy (the tests' `moe_models.mxfp4_quantize`: per 32-element block a power-of-two scale 2**e with
e = ceil(log2(amax / 6)), nearest e2m1 magnitude, ties to the smaller one). One shard per layer plus
one for embedding / lm_head / final norm, so peak RAM is about one layer's shard (~0.24 GB for
gpt-oss-2g) plus the imports.

Shapes (E experts, top-k, expert width I):
- gpt-oss-2g: hidden 2048, 8 layers, 32 q heads / 8 kv heads x 64, E 32, top-4, I 2048, vocab 32000:
  ~2.14 GB on disk (MXFP4 experts ~1.71 GB, the rest bf16), 3.44 B parameters, 0.55 B active per token.
- tiny: hidden 64, 4 layers, 4 q / 2 kv heads x 16, E 32, top-4, I 64, vocab 384, window 32.

`--dense OUT_DENSE` also writes a random Llama checkpoint (bf16, benchmarks/random_llama.py's tensors)
with the same hidden size, heads, layers and vocab and one dense MLP of width top_k * I: the same
parameter count per token as the MoE's active path (attention + top-k experts), without the MoE's
biases, sinks and router (< 0.5 % of the active count; both counts are written to moe_shape.json).
It uses plain RoPE (theta 150000) and full attention on every layer.

The tokenizer is the tests' tiny BPE (tests/tiny_models.save_tokenizer, vocab 384, bos 0 / eos 1 /
pad 5, which config.json uses): fine for export and decode-speed benchmarks, whose prompts are token
ids below 384; the model's vocab (32000 for gpt-oss-2g) is larger than the tokenizer's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

BF16 = ml_dtypes.bfloat16
STD = 0.02
SHAPES: dict[str, dict[str, Any]] = {
    "gpt-oss-2g": dict(hidden_size=2048, num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=8,
                       head_dim=64, num_local_experts=32, num_experts_per_tok=4, intermediate_size=2048,
                       vocab_size=32000, max_position_embeddings=131072),
    "tiny": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 num_local_experts=32, num_experts_per_tok=4, intermediate_size=64, vocab_size=384,
                 max_position_embeddings=1024, sliding_window=32,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 256}),
}  # fmt: skip
TOKENS = dict(bos_token_id=0, eos_token_id=1, pad_token_id=5)  # the tiny tokenizer's ids
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]

# e2m1 magnitudes (codes 0-7; bit 3 is the sign) and the midpoints between neighbours
FP4_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
FP4_MIDPOINTS = (FP4_MAGNITUDES[1:] + FP4_MAGNITUDES[:-1]) / 2


def mxfp4_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w [..., N, K] (out x in, K % 32 == 0) -> blocks uint8 [..., N, K/32, 16], scales uint8 [..., N, K/32].

    value = e2m1[nibble] * 2**(scale - 127); element 2j in the low nibble of byte j, 2j+1 in the high one.
    The numpy twin of tests/moe_models.mxfp4_quantize (same scales and codes, ties to the smaller magnitude)."""
    *lead, n, k = w.shape
    assert k % 32 == 0, k
    w = w.astype(np.float32, copy=False).reshape(*lead, n, k // 32, 32)
    amax = np.maximum(np.abs(w).max(-1), np.float32(2.0**-126))
    e = np.clip(np.ceil(np.log2(amax / np.float32(6.0))), -127, 127)
    scales = (e + 127).astype(np.uint8)
    q = np.abs(w) * np.exp2(-e)[..., None]
    codes = np.zeros(q.shape, np.uint8)
    for mid in FP4_MIDPOINTS:  # code = number of midpoints below q (q on a midpoint -> the lower code)
        codes += q > mid
    codes |= (w < 0).astype(np.uint8) << 3
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return np.ascontiguousarray(blocks), scales


def mxfp4_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Inverse of mxfp4_quantize -> float32 [..., N, K] (for checks)."""
    lut = np.concatenate([FP4_MAGNITUDES, -FP4_MAGNITUDES])
    vals = np.stack([lut[blocks & 0x0F], lut[blocks >> 4]], -1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float32) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)


def config(shape: str) -> dict[str, Any]:
    return {**SHAPES[shape], **TOKENS}


def counts(shape: str) -> dict[str, int]:
    """Parameter counts (MoE total and active per token, dense twin) for this shape."""
    c = config(shape)
    h, n, v, e, k, i = (c[x] for x in ("hidden_size", "num_hidden_layers", "vocab_size", "num_local_experts",
                                       "num_experts_per_tok", "intermediate_size"))  # fmt: skip
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    attn = 2 * q * h + 2 * kv * h  # q, k, v, o weights
    attn_extra = 2 * q + kv + h + c["num_attention_heads"]  # q/k/v/o biases and sinks
    expert = 3 * i * h + 2 * i + h  # gate_up + down weights and biases
    router = e * h + e
    norms = 2 * h
    per_layer = attn + attn_extra + e * expert + router + norms
    active_layer = attn + attn_extra + k * expert + router + norms
    dense_layer = attn + 3 * k * i * h + norms
    return {
        "total": n * per_layer + 2 * v * h + h,
        "active_per_token": n * active_layer + v * h + h,  # the lm_head, not the embedding table
        "dense_total": n * dense_layer + 2 * v * h + h,
        "dense_per_token": n * dense_layer + v * h + h,
        "dense_intermediate": k * i,
    }


def hf_config(shape: str) -> Any:
    from transformers import GptOssConfig

    cfg = GptOssConfig(**config(shape), architectures=["GptOssForCausalLM"], tie_word_embeddings=False,
                       attention_bias=True, dtype="bfloat16")  # fmt: skip
    cfg.quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERTED}
    return cfg


def layer_tensors(cfg: Any, layer: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, heads, kv, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    e, i = cfg.num_local_experts, cfg.intermediate_size

    def w(*shape: int, std: float = STD) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(BF16)

    p = f"model.layers.{layer}."
    out = {
        p + "input_layernorm.weight": np.ones(h, BF16),
        p + "post_attention_layernorm.weight": np.ones(h, BF16),
        p + "self_attn.q_proj.weight": w(heads * d, h), p + "self_attn.q_proj.bias": w(heads * d),
        p + "self_attn.k_proj.weight": w(kv * d, h), p + "self_attn.k_proj.bias": w(kv * d),
        p + "self_attn.v_proj.weight": w(kv * d, h), p + "self_attn.v_proj.bias": w(kv * d),
        p + "self_attn.o_proj.weight": w(h, heads * d), p + "self_attn.o_proj.bias": w(h),
        p + "self_attn.sinks": w(heads, std=1.0),
        p + "mlp.router.weight": w(e, h, std=0.5), p + "mlp.router.bias": w(e, std=0.5),
        p + "mlp.experts.gate_up_proj_bias": w(e, 2 * i), p + "mlp.experts.down_proj_bias": w(e, h),
    }  # fmt: skip
    # MXFP4 experts, drawn and quantized one expert at a time (out x in; gate_up rows interleave gate/up)
    for name, (rows, cols) in (("gate_up_proj", (2 * i, h)), ("down_proj", (h, i))):
        blocks = np.empty((e, rows, cols // 32, 16), np.uint8)
        scales = np.empty((e, rows, cols // 32), np.uint8)
        for x in range(e):
            blocks[x], scales[x] = mxfp4_quantize(rng.standard_normal((rows, cols), dtype=np.float32) * STD)
        out[p + f"mlp.experts.{name}_blocks"], out[p + f"mlp.experts.{name}_scales"] = blocks, scales
    return out


def moe_shards(cfg: Any, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
    h, v = cfg.hidden_size, cfg.vocab_size

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * STD).astype(BF16)

    yield {"model.embed_tokens.weight": w(v, h), "lm_head.weight": w(v, h), "model.norm.weight": np.ones(h, BF16)}
    for layer in range(cfg.num_hidden_layers):
        yield layer_tensors(cfg, layer, rng)


def save_shards(out: Path, shards: Iterator[dict[str, np.ndarray]], count: int) -> int:
    weight_map: dict[str, str] = {}
    total = 0
    for n, shard in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{count:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        total += sum(t.nbytes for t in shard.values())
        weight_map.update(dict.fromkeys(shard, name))
        del shard
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total


def write_moe(out: Path, shape: str = "gpt-oss-2g", seed: int = 0) -> Path:
    from tiny_models import save_tokenizer
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(shape)
    cfg.save_pretrained(out)
    GenerationConfig(**TOKENS).save_pretrained(out)
    total = save_shards(out, moe_shards(cfg, np.random.default_rng(seed)), cfg.num_hidden_layers + 1)
    (out / "moe_shape.json").write_text(json.dumps({"shape": shape, "tensor_bytes": total, **counts(shape)}, indent=2))
    save_tokenizer(out, vocab_size=384)
    return out


def write_dense(out: Path, shape: str = "gpt-oss-2g", seed: int = 1) -> Path:
    """A Llama with the MoE's attention shape and one dense MLP of width top_k * I (random_llama.py's tensors)."""
    from random_llama import tensors
    from tiny_models import save_tokenizer
    from transformers import GenerationConfig, LlamaConfig

    c = config(shape)
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")
    cfg = {key: c[key] for key in keep}
    cfg.update(intermediate_size=c["num_experts_per_tok"] * c["intermediate_size"], tie_word_embeddings=False)
    assert c["hidden_size"] == c["num_attention_heads"] * c["head_dim"], "random_llama derives head_dim = H / heads"
    out.mkdir(parents=True, exist_ok=True)
    LlamaConfig(**cfg, **TOKENS, architectures=["LlamaForCausalLM"], head_dim=c["head_dim"], dtype="bfloat16",
                max_position_embeddings=c["max_position_embeddings"],
                rope_parameters={"rope_type": "default", "rope_theta": 150000.0}).save_pretrained(out)  # fmt: skip
    GenerationConfig(**TOKENS).save_pretrained(out)
    save_shards(out, tensors(cfg, np.random.default_rng(seed), BF16), cfg["num_hidden_layers"] + 1)
    save_tokenizer(out, vocab_size=384)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=SHAPES, default="gpt-oss-2g")
    parser.add_argument("--dense", type=Path, metavar="OUT_DENSE", help="also write the dense Llama twin here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_moe(args.out, args.shape, args.seed)
    if args.dense:
        write_dense(args.dense, args.shape, args.seed + 1)
