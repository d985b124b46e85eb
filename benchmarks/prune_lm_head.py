"""Prefill time and peak memory with and without last-token logits (`--prune-lm-head`).

    python benchmarks/prune_lm_head.py [--shape 150m] [--prompts 1024,4096]

Builds the random-weight Llama of `--shape` twice (cpu fp32, default attention): once with the
shipped default (last-token logits) and once with `--no-prune-lm-head`. Each prompt length runs in
a fresh child process through onnxruntime-genai (append_tokens of the whole prompt), so its peak
RSS is that run's alone; the median of three prefills is reported. Results are appended to
benchmarks/results/prune_lm_head.md.
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
RESULTS = HERE / "results" / "prune_lm_head.md"
MIB = 2**20

CHILD = r"""
import json, resource, sys, time
import numpy as np
import onnxruntime_genai as og
package, length = sys.argv[1], int(sys.argv[2])
model = og.Model(package)
times = []
for _ in range(3):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=length, do_sample=False)
    generator = og.Generator(model, params)
    prompt = (np.arange(length, dtype=np.int32) * 7919 % 30000 + 100).reshape(1, -1)
    start = time.perf_counter()
    generator.append_tokens(prompt)
    logits = generator.get_output("logits")
    times.append((time.perf_counter() - start) * 1000)
print(json.dumps({"ms": sorted(times)[1], "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "rows": int(np.asarray(logits).shape[1])}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--prompts", default="1024,4096")
    parser.add_argument("--work", type=Path, default=Path.home() / "prune-lm-head")
    args = parser.parse_args()
    lengths = [int(x) for x in args.prompts.split(",")]
    ckpt = args.work / args.shape / "ckpt"
    if not (ckpt / "config.json").is_file():
        subprocess.run([sys.executable, str(HERE / "random_llama.py"), str(ckpt), "--shape", args.shape], check=True)
    packages = {}
    for name, flag in (("last-token logits (default)", "--prune-lm-head"), ("full logits", "--no-prune-lm-head")):
        out = args.work / args.shape / name.split()[0]
        subprocess.run(["gqa-export", "build", str(ckpt), "-o", str(out), "-p", "fp32", "--max-length",
                        str(max(lengths)), "--no-smoke", "-q", "--overwrite", flag], check=True)  # fmt: skip
        packages[name] = out
    rows = []
    for length in lengths:
        for name, package in packages.items():
            run = subprocess.run([sys.executable, "-c", CHILD, str(package), str(length)], capture_output=True,
                                 text=True, check=True)  # fmt: skip
            r = json.loads(run.stdout.strip().splitlines()[-1])
            rows.append(f"| {length} | {name} | {r['rows']} | {r['ms']:.0f} ms | {r['rss'] / MIB:.0f} MiB |")
            print(rows[-1], flush=True)
    text = "\n".join([
        f"## {date.today()}: {args.shape} random Llama, cpu fp32, {platform.machine()}, {os.cpu_count()} cores",
        "",
        "| prompt | logits | rows returned | prefill (median of 3) | peak RSS |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])  # fmt: skip
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text("# Last-token logits in prefill\n\n" + __doc__.split("\n\n", 1)[1])
    with RESULTS.open("a") as f:
        f.write("\n" + text)


if __name__ == "__main__":
    main()
