"""Write a random-weight GPTQ v1 4-bit Llama checkpoint (and its dequantized float twin) shard by shard.

    python benchmarks/random_gptq.py OUT --shape gptq-150m|gptq-act-150m|gptq-1b|gptq-act-1b
                                     [--dtype bf16] [--twin TWIN] [--group 128]

The float weights are benchmarks/random_llama.py's (same shapes, same seed, one shard per layer).
Each linear is quantized by round-to-nearest per group of 128 input rows (asymmetric, fp16 scales)
and stored in GPTQ v1's layout (qweight int32 packed along K, qzeros packed along N holding zero - 1,
scales, g_idx), with tests/prequant_models.py's quantizer and packer applied to one tensor at a
time. `act` shapes take the groups in a random input order (desc_act, one permutation per layer
for q/k/v and one for gate/up, as GPTQ's shared Hessian gives). Embeddings, norms and the lm_head
stay float, as GPTQ leaves them. `--twin` also writes (q - z) * s as fp32 `P.weight`: the model the
checkpoint means, which HF transformers runs as an ordinary Llama. Only one layer is in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from random_llama import DTYPES, SHAPES, tensors, write_shards
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from prequant_models import LINEARS, SHARED_INPUT, dequantize, pack_words, quantize

BITS = 4


def shape_of(name: str) -> tuple[str, bool]:
    """`gptq-act-150m` -> ("150m", act_order=True)."""
    rest = name.removeprefix("gptq-")
    act = rest.startswith("act-")
    return rest.removeprefix("act-"), act


def gptq_tensors(prefix: str, w: np.ndarray, perm: np.ndarray | None, group: int) -> tuple[dict, np.ndarray]:
    """One linear W [N, K] in GPTQ v1 4-bit layout, and its fp32 dequantization."""
    k = w.shape[1]
    g_idx = np.arange(k) // group
    if perm is not None:  # perm[t] is the t-th input row quantized: groups follow that order
        g_idx = np.empty(k, np.int64)
        g_idx[perm] = np.arange(k) // group
    q, zeros, scales = quantize(w, BITS, group, g_idx, sym=False)
    stored = {
        f"{prefix}.qweight": pack_words(q.T, BITS, axis=0),  # [K/8, N], along K
        f"{prefix}.qzeros": pack_words(zeros - 1, BITS, axis=1),  # [G, N/8], v1 stores zero - 1
        f"{prefix}.scales": scales,
        f"{prefix}.g_idx": g_idx.astype(np.int32),
    }
    # contiguous: safetensors writes a strided view's buffer as it lies in memory
    return {k: np.ascontiguousarray(v) for k, v in stored.items()}, dequantize(q, zeros, scales, g_idx)


def quantized_shards(
    cfg: dict, dtype, act_order: bool, group: int, twin: Path | None, count: int
) -> Iterator[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)  # random_llama.py's seed: the same float weights
    perm_rng = np.random.default_rng(7)
    for n, shard in enumerate(tensors(cfg, rng, dtype)):
        out, float_twin = {}, {}
        perms: dict[str, np.ndarray] = {}
        for key, value in shard.items():
            proj = key.split(".")[-2]
            if proj not in LINEARS or not key.endswith(".weight"):
                out[key] = float_twin[key] = value
                continue
            prefix = key.removesuffix(".weight")
            w = value.astype(np.float32)
            perm = None
            if act_order:
                shared = f"{prefix.rsplit('.', 1)[0]}.{SHARED_INPUT.get(proj, proj)}"
                perm = perms.setdefault(shared, perm_rng.permutation(w.shape[1]))
            stored, float_twin[key] = gptq_tensors(prefix, w, perm, group)
            out.update(stored)
        if twin is not None:
            save_file(
                float_twin, str(twin / f"model-{n + 1:05d}-of-{count:05d}.safetensors"), metadata={"format": "pt"}
            )
        del shard, float_twin
        yield out


def write(out: Path, name: str, dtype: str, group: int = 128, twin: Path | None = None) -> Path:
    from tiny_models import save_tokenizer
    from transformers import LlamaConfig

    shape, act_order = shape_of(name)
    cfg = SHAPES[shape]
    torch_dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[dtype]
    positions = 131072 if shape in ("1b", "8b") else 4096
    config = LlamaConfig(**cfg, architectures=["LlamaForCausalLM"], bos_token_id=0, eos_token_id=1, pad_token_id=5,
                         max_position_embeddings=positions, dtype=torch_dtype)  # fmt: skip
    count = cfg["num_hidden_layers"] + 1
    for folder in (out, twin):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            config.save_pretrained(folder)
            save_tokenizer(folder, vocab_size=384)
    write_shards(out, quantized_shards(cfg, DTYPES[dtype], act_order, group, twin, count), count)
    if twin is not None:
        weights = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
        twin_map = {k.rsplit(".", 1)[0] + ".weight" if k.endswith(".qweight") else k: f for k, f in weights.items()
                    if not k.endswith((".qzeros", ".scales", ".g_idx"))}  # fmt: skip
        (twin / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": twin_map}))
    qc = {"quant_method": "gptq", "bits": BITS, "group_size": group, "desc_act": act_order, "sym": False,
          "checkpoint_format": "gptq"}  # fmt: skip
    config_json = json.loads((out / "config.json").read_text())
    config_json["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(config_json, indent=2))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", default="gptq-150m")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--twin", type=Path, help="also write the dequantized fp32 twin here")
    args = parser.parse_args()
    write(args.out, args.shape, args.dtype, args.group, args.twin)
