"""KV cache bytes and decode speed: int8 / int4 KV (`--kv-cache`) against the float cache.

    python benchmarks/kv_cache.py [--shape 150m] [--context 4096] [--new 128]

Builds the random-weight Llama of `--shape` (cpu fp32, GQA) with a float, an int8 and an int4 KV
cache, max_length `--context`. Each package runs in a fresh child process through
onnxruntime-genai: a prompt of context - new tokens, then `new` greedy tokens; decode tokens/s
(median of 3), peak RSS, the KV bytes `inspect` reports, the drift the build measured (its
manifest), and how many of the greedy tokens after the long prompt equal the float cache's (the
first divergence) are appended to benchmarks/results/kv_cache.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "kv_cache.md"
MIB = 2**20

CHILD = r"""
import json, resource, sys, time
import numpy as np
import onnxruntime_genai as og
package, context, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = og.Model(package)
rates, tokens = [], []
for _ in range(3):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=context, min_length=context, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens((np.arange(context - new, dtype=np.int32) * 7919 % 30000 + 100).reshape(1, -1))
    start = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
    rates.append((new - 1) / (time.perf_counter() - start))
    tokens = [int(t) for t in generator.get_sequence(0)[context - new:]]
print(json.dumps({"tok_s": sorted(rates)[1], "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "tokens": tokens}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path.home() / "kv-cache")
    args = parser.parse_args()
    ckpt = args.work / args.shape / "ckpt"
    if not (ckpt / "config.json").is_file():
        subprocess.run([sys.executable, str(HERE / "random_llama.py"), str(ckpt), "--shape", args.shape], check=True)
    rows, reference = [], None
    for cache in ("float", "int8", "int4"):
        out = args.work / args.shape / cache
        subprocess.run(["gqa-export", "build", str(ckpt), "-o", str(out), "-p", "fp32", "--attention", "gqa",
                        "--max-length", str(args.context), "--kv-cache", cache, "--no-smoke", "-q", "--overwrite"],
                       check=True)  # fmt: skip
        shown = subprocess.run(["gqa-export", "inspect", str(out), "--json"], capture_output=True, text=True)
        kv_bytes = json.loads(shown.stdout)["summary"]["kv_cache_bytes_per_row"]
        drift = (json.loads((out / "manifest.json").read_text())["options"].get("kv_cache") or {}).get("drift")
        run = subprocess.run([sys.executable, "-c", CHILD, str(out), str(args.context), str(args.new)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        r = json.loads(run.stdout.strip().splitlines()[-1])
        reference = reference or r["tokens"]
        same = next((i for i, (a, b) in enumerate(zip(r["tokens"], reference, strict=True)) if a != b), len(reference))
        drift_cell = (
            f"max {drift['max_abs_logit_diff']:.3g}, mean {drift['mean_abs_logit_diff']:.3g}, "
            f"top-1 {drift['top1_agreement']:.0%}"
            if drift
            else "-"
        )
        rows.append(
            f"| {cache} | {kv_bytes / MIB:.0f} MiB | {r['tok_s']:.1f} | {r['rss'] / MIB:.0f} MiB | {drift_cell} "
            f"| {same} of {len(reference)} |"
        )
        print(rows[-1], flush=True)
    text = "\n".join([
        f"## {date.today()}: {args.shape} random Llama, cpu fp32, context {args.context}, {args.new} new tokens, "
        f"{platform.machine()}, {os.cpu_count()} cores",
        "",
        "| KV cache | KV bytes (one row, max_length) | decode tok/s (median of 3) | peak RSS "
        "| drift vs float (build) | greedy tokens equal to the float cache's, at this context |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ])  # fmt: skip
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text("# Quantized KV cache\n\n" + __doc__.split("\n\n", 1)[1])
    with RESULTS.open("a") as f:
        f.write("\n" + text)


if __name__ == "__main__":
    main()
