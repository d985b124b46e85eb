"""Prefill time, decode speed and memory of the attention modes gqa / bias / split on CPU.

    python benchmarks/attention_modes.py [--rounds 3] [--threads 1]

A ~150M-parameter random Llama (benchmarks/random_llama.py) is exported three times (fp32, CPU)
and each package is run through onnxruntime-genai in its own process: prompt 128 + 256 new tokens
and prompt 1024 + 256 new tokens, EOS suppressed, greedy. Reported: median prefill ms, median
decode tokens/s, peak RSS and final PSS (smaps_rollup; RSS counts shared file pages once per
mapping, PSS splits them) of the process. Appends a table to benchmarks/results/attention_modes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "attention_modes.md"
CASES = ((128, 256), (1024, 256))

WORKER = r"""
import json, resource, sys, time
import onnxruntime_genai as og
package, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = og.Config(package)
config.clear_providers()
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": int(threads)}}}}))
model = og.Model(config)
out = {}
for prompt_len, new in CASES:
    prompt = [(7 * i + 3) % 380 for i in range(prompt_len)]
    prefill, decode = [], []
    for _ in range(rounds):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=prompt_len + new, min_length=prompt_len + new)
        gen = og.Generator(model, params)
        t = time.perf_counter(); gen.append_tokens(prompt); prefill.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter(); n = 0
        while not gen.is_done():
            gen.generate_next_token(); n += 1
        decode.append(n / (time.perf_counter() - t))
        del gen
    out[f"{prompt_len}+{new}"] = {"prefill_ms": prefill, "decode_tps": decode}
pss = next(int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("Pss:"))
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["pss_mib"] = pss / 1024
print(json.dumps(out))
""".replace("CASES", repr(CASES))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        ckpt = Path(tmp) / "ckpt"
        here = Path(__file__).parent
        subprocess.run(
            [sys.executable, str(here / "random_llama.py"), str(ckpt), "--shape", "150m", "--dtype", "fp32"], check=True
        )
        results = {}
        for mode in ("gqa", "bias", "split", "split+no-prepack"):
            out = Path(tmp) / mode
            build_mode = mode.split("+")[0]
            subprocess.run(
                ["gqa-export", "build", str(ckpt), "-o", str(out), "--attention", build_mode, "--no-smoke", "-q"],
                check=True,
            )
            if mode.endswith("+no-prepack"):
                # ORT session config entry (unknown session_options keys are passed through, ortgenai.md
                # §1.4): weights stay file-backed, so both pipeline sessions share the mapped pages.
                config_path = out / "genai_config.json"
                config = json.loads(config_path.read_text())
                config["model"]["decoder"]["session_options"]["session.disable_prepacking"] = "1"
                config_path.write_text(json.dumps(config))
            start = time.perf_counter()
            run = subprocess.run([sys.executable, "-c", WORKER, str(out), str(args.rounds), str(args.threads)],
                                 check=True, capture_output=True, text=True)  # fmt: skip
            results[mode] = json.loads(run.stdout.strip().splitlines()[-1])
            print(mode, f"{time.perf_counter() - start:.0f}s", flush=True)
    for mode, r in results.items():
        cells = []
        for prompt_len, new in CASES:
            case = r[f"{prompt_len}+{new}"]
            cells.append(f"{statistics.median(case['prefill_ms']):.0f} / {statistics.median(case['decode_tps']):.1f}")
        rows.append(f"| {mode} | {' | '.join(cells)} | {r['peak_rss_mib']:.0f} | {r['pss_mib']:.0f} |")
    header = (
        f"\n## {date.today()}: 150M random Llama, fp32, CPU ({platform.machine()}), {args.threads} thread(s), "
        f"median of {args.rounds} rounds\n\n"
        "| mode | prefill ms / decode tok/s, 128 + 256 | 1024 + 256 | peak RSS MiB | PSS MiB |\n|---|---|---|---|---|\n"
    )
    table = header + "\n".join(rows) + "\n"
    print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Attention modes: prefill, decode and memory (onnxruntime-genai, CPU)\n")
    with RESULTS.open("a") as f:
        f.write(table)
    _ = os  # keep the import for readers running variants by hand


if __name__ == "__main__":
    main()
