"""Multi-head latent attention: the expanded cache against the latent cache (docs/latent-attention.md).

    python benchmarks/latent_cache.py [--context 1024] [--new 64] [--write-results]

Builds one random DeepSeek-V2-Lite-shaped checkpoint (16 heads of 128 no-rope + 64 rope dims,
values 128, a 512-wide latent, no q-LoRA; fewer layers, experts and vocabulary, so that it fits a
CPU run), exports it twice in fp32 (mode gqa: expanded per-head K/V; attention.latent_cache: one kv
head of 512 + 64) and reports each package's KV bytes per token and layer (from genai_config) and
onnxruntime-genai's greedy decode speed after a `--context`-token prompt. Random weights: the
numbers are about the cache shape and the attention work, not the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

SHAPE = dict(
    hidden_size=1024, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=16,
    q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=256,
    n_shared_experts=2, topk_method="greedy", routed_scaling_factor=1.0, vocab_size=1024, max_position_embeddings=4096,
)  # fmt: skip


def decode_speed(package: Path, context: int, new: int) -> float:
    """Greedy tokens per second after a `context`-token prompt (the prompt's time excluded)."""
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(str(package))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=context + new, min_length=context + new)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([[(7 * i + 3) % 1000 + 6 for i in range(context)]], dtype=np.int32))
    start = time.perf_counter()
    for _ in range(new):
        generator.generate_next_token()
    return new / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    from moe_models import save_moe

    from gqa_export.pipeline import BuildOptions, build

    tmp = Path(tempfile.mkdtemp())
    checkpoint = save_moe(tmp / "ckpt", "deepseek_v2", hub_layout=False, **SHAPE)
    rows = []
    for label, settings in (("expanded (default)", ()), ("latent_cache", ("attention.latent_cache=true",))):
        package = tmp / label.split()[0]
        build(BuildOptions(str(checkpoint), package, smoke=False, settings=settings))
        decoder = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
        kv_bytes = 2 * decoder["num_key_value_heads"] * decoder["head_size"] * 4  # key + value buffers, fp32
        rows.append((label, decoder["num_key_value_heads"], decoder["head_size"], kv_bytes,
                     decode_speed(package, args.context, args.new)))  # fmt: skip
    lines = [
        f"DeepSeek-V2-Lite-shaped random checkpoint, {SHAPE['num_hidden_layers']} layers, fp32, CPU, "
        f"context {args.context}, {args.new} greedy tokens",
        "",
        "| cache | kv heads | head size | KV bytes / token / layer | decode tokens/s |",
        "|---|---|---|---|---|",
        *(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:,} | {r[4]:.1f} |" for r in rows),
    ]
    print("\n".join(lines))
    if args.write_results:
        (ROOT / "benchmarks" / "results" / "latent_cache.md").write_text("# Latent cache\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
