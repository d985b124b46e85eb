"""A hybrid decoder against a dense one of the same width: cache bytes per row and decode speed.

    python benchmarks/hybrid_decode.py [--new-tokens 128] [--prompt 512]

Builds two random-weight checkpoints with transformers (torch on CPU, the benchmark's only use of
it) of the same width, depth, heads and vocabulary: an LFM2 hybrid (short-convolution layers with a
fixed-size state, attention on every third layer) and a Llama whose every layer is attention;
exports both (cpu fp32, gqa, max_length 4096) and reports, side by side in one run:
- bytes one batch row holds: the KV cache at 4k and 32k tokens of context (from the graphs'
  cache shapes) plus the recurrent state (constant);
- decode tokens/s through onnxruntime-genai after a `--prompt`-token prompt (median of 3).
Results are appended to benchmarks/results/hybrid_decode.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' tiny tokenizer maker
RESULTS = HERE / "results" / "hybrid_decode.md"
SHAPE = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=32768)  # fmt: skip


def _checkpoints(root: Path) -> dict[str, Path]:
    import torch
    from tiny_models import save_tokenizer
    from transformers import Lfm2Config, Lfm2ForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    layers = ["full_attention" if i % 3 == 2 else "conv" for i in range(SHAPE["num_hidden_layers"])]
    models = {
        "LFM2 hybrid (4 of 12 layers attention)": Lfm2ForCausalLM(
            Lfm2Config(**SHAPE, layer_types=layers, block_auto_adjust_ff_dim=False, tie_word_embeddings=False)
        ),
        "Llama (12 of 12 layers attention)": LlamaForCausalLM(LlamaConfig(**SHAPE, tie_word_embeddings=False)),
    }
    out = {}
    for name, model in models.items():
        folder = root / name.split()[0].lower()
        model.save_pretrained(folder)
        save_tokenizer(folder, vocab_size=384)  # the package needs one; the benchmark feeds token ids
        out[name] = folder
    return out


def _cache_bytes(package: Path, context: int) -> tuple[int, int]:
    """(KV bytes, recurrent-state bytes) one batch row holds at `context` tokens."""
    from gqa_export.check.reader import load_package

    pkg = load_package(package)
    kv = pkg.kv_bytes_per_row() or 0
    assert pkg.max_length
    return kv * context // pkg.max_length, pkg.state_bytes_per_row()


def _decode_speed(package: Path, prompt: int, new: int) -> float:
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(str(package))
    speeds = []
    for _ in range(3):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt + new, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens((np.arange(prompt, dtype=np.int32) * 7919 % 30000 + 100).reshape(1, -1))
        start = time.perf_counter()
        for _ in range(new):
            generator.generate_next_token()
        speeds.append(new / (time.perf_counter() - start))
    return statistics.median(speeds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()

    from gqa_export.pipeline import BuildOptions, build

    root = Path(tempfile.mkdtemp(prefix="hybrid-decode-"))
    rows = []
    for name, checkpoint in _checkpoints(root).items():
        package = root / f"{checkpoint.name}-onnx"
        build(BuildOptions(str(checkpoint), package, smoke=False, max_length=4096))
        kv4, state = _cache_bytes(package, 4096)
        kv32, _ = _cache_bytes(package, 32768)
        speed = _decode_speed(package, args.prompt, args.new_tokens)
        rows.append(f"| {name} | {kv4 / 2**20:.1f} | {kv32 / 2**20:.1f} | {state / 2**10:.1f} | {speed:.1f} |")
    text = "\n".join(
        [
            f"\n## {date.today()}: hidden 768, 12 layers, 12/4 heads, vocab 32k, cpu fp32, prompt {args.prompt}, "
            f"{args.new_tokens} new tokens, {platform.machine()}, {len(os.sched_getaffinity(0))} cores\n",
            "| model | KV MiB/row at 4k | KV MiB/row at 32k | recurrent state KiB/row | decode tok/s |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text("# Hybrid vs dense decoder: cache bytes and decode speed\n\n" + __doc__.split("\n\n", 1)[1])
    with RESULTS.open("a") as out:
        out.write(text + "\n")


if __name__ == "__main__":
    main()
