"""Prefill time, decode speed and memory of every attention mode on CPU, side by side in one run.

    python benchmarks/attention_modes.py [--rounds 3] [--threads 1] [--cases 128,1024,4096] [--new 256]

A ~150M-parameter random Llama (benchmarks/random_llama.py, max_position_embeddings 8192) is
exported once per mode (fp32, CPU, max_length = longest case + new) and each package runs through
onnxruntime-genai in its own process: for each prompt length, `--new` greedy tokens with EOS
suppressed, modes interleaved round by round so that machine noise spreads over all of them.
Modes:
- gqa: GroupQueryAttention on the shared buffer;
- bias: one standard-Attention graph on the shared buffer, reading its first T slots (CPU form);
- bias-nonpad: the same graph reading the whole buffer with nonpad_kv_seqlen (the CUDA form);
- bias-growing: the concatenating form (share buffer off; kept for beam search);
- split: prefill graph (bias) + decode graph (gqa), prepacking off (the CPU default);
- bias-gqa: GroupQueryAttention with an attention_bias on the layers that need one (CPU only).
`--bidirectional-token-ids 300,301` builds every mode with those ids (gqa cannot), so that the
bias is needed on every layer: the case `auto` decides.
Reported: median prefill ms, median decode tokens/s, peak RSS and final PSS (smaps_rollup) of
the process. Appends a table to benchmarks/results/attention_modes.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "attention_modes.md"
MODES: dict[str, list[str]] = {
    "gqa": ["--attention", "gqa"],
    "bias": ["--attention", "bias"],
    "bias-nonpad": ["--attention", "bias", "--set", "attention.bias_kv_read=nonpad"],
    "bias-growing": ["--attention", "bias", "--set", "attention.bias_cache=growing"],
    "split": ["--attention", "split"],
    "bias-gqa": ["--attention", "bias", "--set", "attention.bias_op=gqa"],
}

WORKER = r"""
import json, resource, sys, time
import onnxruntime_genai as og
package, prompt_len, new, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = og.Config(package)
config.clear_providers()
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
model = og.Model(config)
prompt = [(7 * i + 3) % 380 for i in range(prompt_len)]
params = og.GeneratorParams(model)
params.set_search_options(do_sample=False, max_length=prompt_len + new, min_length=prompt_len + new)
gen = og.Generator(model, params)
t = time.perf_counter(); gen.append_tokens(prompt); prefill = (time.perf_counter() - t) * 1e3
t = time.perf_counter(); n = 0
while not gen.is_done():
    gen.generate_next_token(); n += 1
decode = n / (time.perf_counter() - t)
pss = next(int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("Pss:"))
print(json.dumps({"prefill_ms": prefill, "decode_tps": decode,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "pss_mib": pss / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cases", default="128,1024,4096", help="prompt lengths")
    parser.add_argument("--new", type=int, default=256, help="generated tokens per case")
    parser.add_argument("--modes", default="gqa,bias,bias-nonpad,bias-growing,split")
    parser.add_argument("--bidirectional-token-ids", default=None, help="e.g. 300,301 (prompts hold some)")
    args = parser.parse_args()
    cases = [int(c) for c in args.cases.split(",")]
    modes = args.modes.split(",")
    max_length = max(cases) + args.new
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        ckpt = Path(tmp) / "ckpt"
        here = Path(__file__).parent
        subprocess.run([sys.executable, str(here / "random_llama.py"), str(ckpt), "--shape", "150m", "--dtype",
                        "fp32", "--max-positions", str(max(8192, max_length))], check=True)  # fmt: skip
        packages = {}
        for mode in modes:
            packages[mode] = Path(tmp) / mode
            cmd = ["gqa-export", "build", str(ckpt), "-o", str(packages[mode]), "--max-length", str(max_length),
                   "--no-smoke", "-q", *MODES[mode]]  # fmt: skip
            if args.bidirectional_token_ids:
                cmd += ["--bidirectional-token-ids", args.bidirectional_token_ids]
            subprocess.run(cmd, check=True)
        runs: dict[tuple[str, int], list[dict]] = {}
        for round_ in range(args.rounds):
            for prompt_len in cases:
                for mode in modes:  # interleaved: noise hits every mode alike
                    start = time.perf_counter()
                    worker = [sys.executable, "-c", WORKER, str(packages[mode]), str(prompt_len), str(args.new),
                              str(args.threads)]  # fmt: skip
                    run = subprocess.run(worker, check=True, capture_output=True, text=True)
                    runs.setdefault((mode, prompt_len), []).append(json.loads(run.stdout.strip().splitlines()[-1]))
                    print(f"round {round_} {mode} {prompt_len}: {time.perf_counter() - start:.0f}s", flush=True)
    table = _table(runs, modes, cases, args)
    print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Attention modes: prefill, decode and memory (onnxruntime-genai, CPU)\n")
    with RESULTS.open("a") as f:
        f.write(table)


def _table(runs: dict[tuple[str, int], list[dict]], modes: list[str], cases: list[int], args) -> str:
    def median(mode: str, prompt_len: int, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode, prompt_len])

    head = " | ".join(f"{c} + {args.new}: prefill ms / decode tok/s / peak RSS / PSS MiB" for c in cases)
    lines = [
        f"\n## {date.today()}: 150M random Llama, fp32, CPU ({platform.machine()}), {args.threads} thread(s), "
        f"median of {args.rounds} rounds, modes interleaved"
        + (f", bidirectional token ids {args.bidirectional_token_ids}" if args.bidirectional_token_ids else "")
        + "\n",
        f"| mode | {head} |",
        "|---|" + "---|" * len(cases),
    ]
    for mode in modes:
        cells = [
            f"{median(mode, c, 'prefill_ms'):.0f} / {median(mode, c, 'decode_tps'):.1f} / "
            f"{median(mode, c, 'peak_rss_mib'):.0f} / {median(mode, c, 'pss_mib'):.0f}"
            for c in cases
        ]
        lines.append(f"| {mode} | {' | '.join(cells)} |")
    gqa = "gqa" if "gqa" in modes else None
    if gqa:
        lines.append("")
        for mode in modes:
            ratios = [median(mode, c, "decode_tps") / median(gqa, c, "decode_tps") for c in cases]
            lines.append(
                f"- {mode}: decode vs gqa " + ", ".join(f"{c}: {r:.2f}x" for c, r in zip(cases, ratios, strict=True))
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
