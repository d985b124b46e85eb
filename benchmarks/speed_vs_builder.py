"""Prefill and decode speed of our packages beside the official ORT GenAI model builder's (issue #40).

    python benchmarks/speed_vs_builder.py [--shape 150m|1b|moe|hybrid|lfm2] [--lengths 64,512,2048]
        [--threads 1,2] [--new-tokens 64] [--reps 3] [--cases int4,int4-sym,...] [--ep cpu|cuda]
        [--profile] [--keep DIR] [--results FILE]

Both exporters read the same random-weight checkpoint (benchmarks/random_llama.py, random_moe.py:
gpt-oss-shaped MXFP4 experts, random_hybrid.py: Qwen3.5's DeltaNet hybrid, which the builder 0.18 does
not export, and LFM2's short-convolution hybrid, which it does). Each of our layouts is
measured beside the builder's package of the same precision: `int4` (our default: asymmetric,
packed qkv; gate and up packed + Split on CUDA, apart on CPU since round 3; the builder 0.18 packs
qkv too but keeps gate and up apart), `int4-packed` (--set mlp.packed_gate_up=true),
`int4-sym` (--symmetric: no zero points, as the builder writes), `int4-qkv` (--set
attention.packed_qkv=false: q, k, v as three MatMulNBits), `int4-gu` (--set mlp.packed_gate_up=false:
gate and up as two MatMulNBits, no Split), `int4-sym-gu` (both: the builder's layout), `int4-window`
(--set attention.sliding_window_cache=true: window-sized KV buffers on sliding layers, as the
builder's gpt-oss package has), `int8-zp`
(-p int8 --asymmetric: zero points, the int8 default until round 6), `int4-pruned` (--prune-lm-head:
last-position logits only; the builder's package returns every position's), `int8` (no zero points, as
the builder writes), `fp32`; on
CUDA `fp16` and `int4`.

A run is one fresh process per (package, threads, prompt length): the model is loaded with
intra_op_num_threads = threads, one short warm-up generation runs, then the prompt is appended
(prefill tok/s = prompt length / its time) and `--new-tokens` greedy steps follow (decode tok/s).
Runs alternate between the packages of a pair and the order flips every repetition, so a
machine's drift hits both; the table gives the median and the spread (min-max) of `--reps` runs.
With `--profile`, every cell where ours is slower is run once more under onnxruntime's profiler
(genai's session option `enable_profiling`) for both packages, and the time per op type is
tabulated side by side: which nodes cost the difference.

Appends to benchmarks/results/speed_vs_builder.md. Needs a quiet machine: another job on the same
cores moves these numbers by tens of percent.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "speed_vs_builder.md"
CHECKPOINTS = {  # shape -> (writer script, its --shape, builder-visible name)
    "150m": ("random_llama.py", "150m"),
    "1b": ("random_llama.py", "1b"),
    "moe": ("random_moe.py", "gpt-oss-2g"),
    "hybrid": ("random_hybrid.py", "qwen3_5-230m"),  # the builder 0.18 refuses Qwen3.5
    "lfm2": ("random_hybrid.py", "lfm2-350m"),
}
# our layout -> (gqa-export build flags, the builder precision it is measured beside)
CASES: dict[str, tuple[list[str], str]] = {
    "int4": (["-p", "int4"], "int4"),
    "int4-sym": (["-p", "int4", "--symmetric"], "int4"),
    "int4-qkv": (["-p", "int4", "--set", "attention.packed_qkv=false"], "int4"),
    "int4-gu": (["-p", "int4", "--set", "mlp.packed_gate_up=false"], "int4"),
    "int4-packed": (["-p", "int4", "--set", "mlp.packed_gate_up=true"], "int4"),  # the CPU default before round 3
    "int4-sym-gu": (["-p", "int4", "--symmetric", "--set", "mlp.packed_gate_up=false"], "int4"),
    "int4-pruned": (["-p", "int4", "--prune-lm-head"], "int4"),
    "int4-window": (["-p", "int4", "--set", "attention.sliding_window_cache=true"], "int4"),
    "int8": (["-p", "int8"], "int8"),
    "int8-zp": (["-p", "int8", "--asymmetric"], "int8"),  # the int8 default until round 6
    "fp32": (["-p", "fp32"], "fp32"),
    "fp32-gu": (["-p", "fp32", "--set", "mlp.packed_gate_up=false"], "fp32"),
    "fp16": (["-p", "fp16"], "fp16"),
}
# One measured run, in a process of its own (argv: package, threads, prompt length, new tokens,
# profile prefix or ""); prints {"prefill": tok/s, "decode": tok/s, "profile": file or null}.
WORKER = r"""
import json, sys, time
import onnxruntime_genai as og
package, profile, ep = sys.argv[1], sys.argv[5], sys.argv[6]
threads, length, new = (int(a) for a in sys.argv[2:5])
config = og.Config(package)
config.clear_providers()
if ep == "cuda":
    config.append_provider("cuda")
options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
if profile:
    options["enable_profiling"] = profile
config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
model = og.Model(config)
vocab = json.load(open(f"{package}/genai_config.json"))["model"]["vocab_size"]
prompt = [(37 * i + 11) % (vocab - 10) + 5 for i in range(length)]

def generate(tokens, steps):
    params = og.GeneratorParams(model)
    # one max_length for the warm-up and the run: a package with window-sized KV buffers (the
    # builder's gpt-oss) refuses a max_length below its window
    params.set_search_options(do_sample=False, max_length=length + new, min_length=length + new)
    gen = og.Generator(model, params)
    start = time.perf_counter()
    gen.append_tokens(tokens)
    prefilled = time.perf_counter()
    for _ in range(steps):
        gen.generate_next_token()
    done = time.perf_counter()
    return len(tokens) / (prefilled - start), steps / (done - prefilled)

generate(prompt[:16], 4)  # warm-up: first-run allocations out of the measured run
prefill, decode = generate(prompt, new)
print(json.dumps({"prefill": prefill, "decode": decode}))
"""


def run(cmd: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise RuntimeError(f"{' '.join(cmd[:6])} ...: {last[-1]}")
    return done.stdout


def checkpoint(shape: str, root: Path) -> Path:
    writer, writer_shape = CHECKPOINTS[shape]
    out = root / f"ckpt-{shape}"
    if not (out / "config.json").exists():
        run([sys.executable, str(HERE / writer), str(out), "--shape", writer_shape])
    return out


def build_ours(ckpt: Path, case: str, ep: str, root: Path) -> Path:
    out = root / f"ours-{ep}-{case}"
    if not (out / "genai_config.json").exists():
        run(["gqa-export", "build", str(ckpt), "-o", str(out), "--ep", ep, *CASES[case][0], "--no-smoke", "-q"])
    return out


def build_builder(ckpt: Path, precision: str, ep: str, root: Path) -> Path:
    out = root / f"builder-{ep}-{precision}"
    if not (out / "genai_config.json").exists():
        run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out), "-p",
             precision, "-e", ep, "-c", str(root / "builder-cache")])  # fmt: skip
    return out


def measure(package: Path, threads: int, length: int, new: int, ep: str, profile: str = "") -> dict[str, float]:
    out = run([sys.executable, "-c", WORKER, str(package), str(threads), str(length), str(new), profile, ep])
    return json.loads(out.splitlines()[-1])


def op_times(trace_dir: Path, prefix: str) -> dict[str, float]:
    """Milliseconds per op type in the newest onnxruntime profile written under `prefix`."""
    traces = sorted(trace_dir.glob(f"{prefix}*.json"), key=lambda p: p.stat().st_mtime)
    if not traces:
        return {}
    totals: dict[str, float] = defaultdict(float)
    for event in json.loads(traces[-1].read_text()):
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            totals[event.get("args", {}).get("op_name", "?")] += event.get("dur", 0) / 1000
    return dict(totals)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=CHECKPOINTS, default="150m")
    parser.add_argument("--lengths", default="64,512,2048")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default="int4,int4-sym,int4-qkv,int4-pruned,int8,fp32")
    parser.add_argument("--ep", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--keep", type=Path, help="build into (and reuse) this folder instead of a temporary one")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the markdown file the table is appended to")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        ckpt = checkpoint(args.shape, root)
        pairs, refused = {}, {}
        for case in cases:
            try:
                ours = build_ours(ckpt, case, args.ep, root)
                pairs[case] = (ours, build_builder(ckpt, CASES[case][1], args.ep, root))
            except RuntimeError as exc:
                refused[case] = str(exc)
                print(f"{case}: not measured: {exc}", flush=True)
        rows, profiles = [], []
        for case, (ours, builder) in pairs.items():
            for t in threads:
                for length in lengths:
                    got: dict[str, list[dict[str, float]]] = {"ours": [], "builder": []}
                    for rep in range(args.reps):
                        order = [("ours", ours), ("builder", builder)]
                        for name, package in order if rep % 2 == 0 else order[::-1]:
                            got[name].append(measure(package, t, length, args.new_tokens, args.ep))
                    med = {n: {k: statistics.median(r[k] for r in got[n]) for k in ("prefill", "decode")} for n in got}
                    ratio = {k: med["ours"][k] / med["builder"][k] for k in ("prefill", "decode")}
                    row = (f"| {case} | {t} | {length} | {spread([r['prefill'] for r in got['ours']])} "
                           f"| {spread([r['prefill'] for r in got['builder']])} | {ratio['prefill']:.2f} "
                           f"| {spread([r['decode'] for r in got['ours']])} "
                           f"| {spread([r['decode'] for r in got['builder']])} | {ratio['decode']:.2f} |")  # fmt: skip
                    rows.append(row)
                    print(row, flush=True)
                    if args.profile and min(ratio.values()) < 1.0:
                        profiles.append(profile_cell(case, ours, builder, t, length, args, root))
    header = (
        f"\n## {date.today()}: {args.shape}, {args.ep} ({platform.machine()}), {args.new_tokens} new tokens, "
        f"median (min-max) of {args.reps} alternating runs\n\n"
        "| case | threads | prompt | ours prefill tok/s | builder prefill tok/s | ratio | ours decode tok/s "
        "| builder decode tok/s | ratio |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    text = header + "\n".join(rows) + "\n"
    text += "".join(f"\n{case}: not measured ({why})\n" for case, why in refused.items())
    text += "".join(profiles)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    if not args.results.exists():
        args.results.write_text("# Package speed: gqa-export vs the official ORT GenAI model builder (issue #40)\n")
    with args.results.open("a") as f:
        f.write(text)
    print(text)


def profile_cell(
    case: str, ours: Path, builder: Path, threads: int, length: int, args: argparse.Namespace, root: Path
) -> str:
    """One profiled run of each package: milliseconds per op type, the largest differences first."""
    traces = root / "profiles"
    traces.mkdir(exist_ok=True)
    times = {}
    for name, package in (("ours", ours), ("builder", builder)):
        prefix = str(traces / f"{case}-{threads}-{length}-{name}-")
        measure(package, threads, length, args.new_tokens, args.ep, profile=prefix)
        times[name] = op_times(traces, Path(prefix).name)
    ops = sorted(set(times["ours"]) | set(times["builder"]),
                 key=lambda op: -abs(times["ours"].get(op, 0) - times["builder"].get(op, 0)))  # fmt: skip
    lines = [f"\nProfile, {case}, {threads} thread(s), prompt {length} + {args.new_tokens} steps (ms per op type):\n",
             "| op | ours ms | builder ms | ours - builder |", "|---|---|---|---|"]  # fmt: skip
    for op in ops[:12]:
        a, b = times["ours"].get(op, 0.0), times["builder"].get(op, 0.0)
        lines.append(f"| {op} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
