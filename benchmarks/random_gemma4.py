"""Write a random-weight Gemma-4-E2B-shaped checkpoint without torch (numpy + safetensors).

    python benchmarks/random_gemma4.py OUT [--shape e2b|tiny] [--dtype bf16|fp16|fp32]

The checkpoint is a `Gemma4ForConditionalGeneration` (model_type gemma4) with the text decoder under
`model.language_model.`, as the hub's google/gemma-4-E2B checkpoints are laid out, but it holds NO
vision or audio tower tensors: config.json describes the towers (transformers' default vision and
audio configs for e2b, tiny ones for tiny) and gqa-export never reads their weights. transformers
loads the folder and reports the tower weights missing (it initializes them randomly).

Every text feature of E2B is there: 35 layers, 4 sliding (window 512, head_dim 256) then 1 full
(head_dim 512, proportional partial RoPE), 1 kv head, the last 20 layers KV-shared (only q_proj,
q_norm and o_proj in their attention) with double-wide MLPs, k != v (v_proj on every unshared
layer), per-layer embeddings (a [262144, 35*256] table, 4.7 GB in bf16), stored layer scalars,
final logit softcap 30, tied embeddings. `--shape tiny` is the same structure at toy sizes
(7 layers S S S S F S F, the last 2 shared) for quick checks.

Weights are drawn per tensor (std 0.02; norm weights and layer scalars 1 + small noise) and written
shard by shard (<= 2 GB each, except the PLE table, a single tensor, which gets a shard of its own),
so peak RAM is about the largest shard plus the imports: ~4.7 GB for e2b in bf16 (the PLE table,
drawn in float32 row blocks into one preallocated bf16 array; save_file writes from the array's
memory without a copy) + ~0.5 GB. The e2b checkpoint is 9.26 GB in 4 shards (0.8, 4.7, 2.0, 1.8 GB).
The tokenizer is the tests' tiny BPE (vocab 384): its ids do not match the config's bos/eos/pad
(2/1/0) or its 262144-row vocab, which is fine for export benchmarks (no generation).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

PREFIX = "model.language_model."
SHARD_BYTES = 2 * 10**9
BLOCK_ELEMENTS = 1 << 25  # rows are drawn in float32 blocks of about this many elements (128 MiB)
SHAPES: dict[str, dict[str, Any]] = {
    # google/gemma-4-E2B's text decoder
    "e2b": dict(hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8,
                num_key_value_heads=1, head_dim=256, global_head_dim=512, sliding_window=512, vocab_size=262144,
                vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256, num_kv_shared_layers=20,
                max_position_embeddings=131072),
    # the same structure at toy sizes: S S S S F S F, layers 5 and 6 read layers 3 and 4
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=7, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=16, global_head_dim=32, sliding_window=8, vocab_size=384,
                 vocab_size_per_layer_input=384, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
                 max_position_embeddings=4096),
}  # fmt: skip
COMMON: dict[str, Any] = dict(
    attention_k_eq_v=False, use_double_wide_mlp=True, final_logit_softcapping=30.0, tie_word_embeddings=True,
    hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0,
    use_bidirectional_attention="vision",
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
    },
)  # fmt: skip
# Placeholder / boundary ids at the top level of the gemma4 config (tiny: inside its 384-token vocab)
TOKEN_IDS = {
    "e2b": {},  # Gemma4Config's defaults: image 258880, audio 258881, video 258884, boi 255999, ...
    "tiny": dict(image_token_id=300, video_token_id=301, audio_token_id=302, boi_token_id=303, eoi_token_id=304,
                 boa_token_id=305, eoa_token_index=306),
}  # fmt: skip
DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def text_config(shape: str) -> dict[str, Any]:
    cfg = {**COMMON, **SHAPES[shape]}
    n = cfg["num_hidden_layers"]
    cfg["layer_types"] = ["full_attention" if (i + 1) % 5 == 0 or i == n - 1 else "sliding_attention" for i in range(n)]
    return cfg


def hf_config(shape: str, dtype: str) -> Any:
    import transformers as tf

    text = tf.Gemma4TextConfig(**text_config(shape))
    if shape == "tiny":
        vision = tf.Gemma4VisionConfig(
            hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            head_dim=4, patch_size=2, pooling_kernel_size=2, position_embedding_size=16,
        )  # fmt: skip
        audio = tf.Gemma4AudioConfig(
            hidden_size=8, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[4, 4],
            conv_kernel_size=3, output_proj_dims=8,
        )  # fmt: skip
    else:
        vision, audio = tf.Gemma4VisionConfig(), tf.Gemma4AudioConfig()
    return tf.Gemma4Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), audio_config=audio.to_dict(),
        tie_word_embeddings=True, architectures=["Gemma4ForConditionalGeneration"], dtype=TORCH_DTYPES[dtype],
        **TOKEN_IDS[shape],
    )  # fmt: skip


def tensor_specs(cfg: dict[str, Any]) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init) of every text-decoder tensor; init is "w" (N(0, 0.02)) or "one" (1 + noise)."""
    h, n, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    p, v_ple = cfg["hidden_size_per_layer_input"], cfg["vocab_size_per_layer_input"]
    first_shared = n - cfg["num_kv_shared_layers"]
    specs = [
        (PREFIX + "embed_tokens.weight", (cfg["vocab_size"], h), "w"),
        (PREFIX + "norm.weight", (h,), "one"),
        (PREFIX + "embed_tokens_per_layer.weight", (v_ple, n * p), "w"),
        (PREFIX + "per_layer_model_projection.weight", (n * p, h), "w"),
        (PREFIX + "per_layer_projection_norm.weight", (p,), "one"),
    ]
    for i, kind in enumerate(cfg["layer_types"]):
        full = kind == "full_attention"
        shared = i >= first_shared
        hd = cfg["global_head_dim"] if full else cfg["head_dim"]
        kv = cfg["num_key_value_heads"]
        if full and cfg["attention_k_eq_v"]:  # the hub key only applies with k = v (as transformers reads it)
            kv = cfg.get("num_global_key_value_heads") or kv
        inter = cfg["intermediate_size"] * (2 if shared and cfg["use_double_wide_mlp"] else 1)
        a = f"{PREFIX}layers.{i}."
        specs += [(a + f"{norm}.weight", (h,), "one") for norm in
                  ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                   "post_feedforward_layernorm", "post_per_layer_input_norm")]  # fmt: skip
        specs += [
            (a + "layer_scalar", (1,), "one"),
            (a + "self_attn.q_proj.weight", (heads * hd, h), "w"),
            (a + "self_attn.q_norm.weight", (hd,), "one"),
            (a + "self_attn.o_proj.weight", (h, heads * hd), "w"),
        ]
        if not shared:  # KV-shared layers read the store layer's K/V: no k/v projections of their own
            specs += [(a + "self_attn.k_proj.weight", (kv * hd, h), "w"), (a + "self_attn.k_norm.weight", (hd,), "one")]
            if not (full and cfg["attention_k_eq_v"]):
                specs.append((a + "self_attn.v_proj.weight", (kv * hd, h), "w"))
        specs += [
            (a + "mlp.gate_proj.weight", (inter, h), "w"),
            (a + "mlp.up_proj.weight", (inter, h), "w"),
            (a + "mlp.down_proj.weight", (h, inter), "w"),
            (a + "per_layer_input_gate.weight", (p, h), "w"),
            (a + "per_layer_projection.weight", (h, p), "w"),
        ]
    return specs


def shards(specs: list[tuple[str, tuple[int, ...], str]], itemsize: int) -> list[list[tuple]]:
    """Group specs in order into shards of <= SHARD_BYTES; a bigger tensor gets a shard of its own."""
    groups: list[list[tuple]] = [[]]
    size = 0
    for spec in specs:
        nbytes = int(np.prod(spec[1])) * itemsize
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(spec)
        size += nbytes
    return groups


def draw(shape: tuple[int, ...], init: str, rng: np.random.Generator, dtype: Any) -> np.ndarray:
    """A random tensor drawn in row blocks straight into the output dtype (no full-size float32 copy)."""
    out = np.empty(shape, dtype)
    std, offset = (0.02, 0.0) if init == "w" else (0.05, 1.0)
    rows = max(1, BLOCK_ELEMENTS // max(1, int(np.prod(shape[1:]))))
    for start in range(0, shape[0], rows):
        block = rng.standard_normal((min(rows, shape[0] - start), *shape[1:]), dtype=np.float32)
        block *= std
        block += offset
        out[start : start + len(block)] = block.astype(dtype)
    return out


def write(out: Path, shape: str = "e2b", dtype: str = "bf16", seed: int = 0, tokenizer: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    hf_config(shape, dtype).save_pretrained(out)
    rng = np.random.default_rng(seed)
    np_dtype = DTYPES[dtype]
    groups = shards(tensor_specs(text_config(shape)), np.dtype(np_dtype).itemsize)
    weight_map: dict[str, str] = {}
    total = 0
    for n, group in enumerate(groups):
        name = f"model-{n + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {key: draw(dims, init, rng, np_dtype) for key, dims, init in group}
        save_file(shard, str(out / name), metadata={"format": "pt"})
        total += sum(t.nbytes for t in shard.values())
        weight_map.update(dict.fromkeys(shard, name))
        del shard
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    if tokenizer:
        from tiny_models import save_tokenizer

        save_tokenizer(out, vocab_size=384)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=SHAPES, default="e2b")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype, args.seed)
