"""int4 against the official ORT GenAI model builder at the same block size.

    python benchmarks/quant_vs_builder.py [--shape 150m|1b] [--block-size 32]

Both exporters run on the same random-weight bf16 Llama checkpoint (benchmarks/random_llama.py),
each in its own process (peak RSS from wait4). Accuracy: prompt logits through onnxruntime-genai
on a fixed prompt set against our fp32 export of the same checkpoint (relative L2 and next-token
agreement). Speed: decode tokens/s, prompt 128 + 128 new tokens, one thread. Appends to
benchmarks/results/quant_vs_builder.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from gqa_export.runtime.logit_error import logit_error

RESULTS = Path(__file__).parent / "results" / "quant_vs_builder.md"
SPEED = r"""
import json, sys, time
import onnxruntime_genai as og
config = og.Config(sys.argv[1]); config.clear_providers()
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": 1}}}}))
model = og.Model(config)
rates = []
for _ in range(3):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=256, min_length=256)
    gen = og.Generator(model, params)
    gen.append_tokens([(5 * i + 1) % 300 for i in range(128)])
    t = time.perf_counter(); n = 0
    while not gen.is_done():
        gen.generate_next_token(); n += 1
    rates.append(n / (time.perf_counter() - t))
print(sorted(rates)[1])
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    # stderr goes to a file: an unread pipe fills up with progress bars and blocks the child.
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
        if status != 0:
            log.seek(0)
            raise SystemExit(f"{cmd[:4]} failed: {log.read().decode()[-2000:]}")
        return time.perf_counter() - start, usage.ru_maxrss / 1024


def folder_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file() and p.suffix in (".onnx", ".data")) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--block-size", type=int, default=32)
    args = parser.parse_args()
    here = Path(__file__).parent
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        root = Path(tmp)
        ckpt = root / "ckpt"
        subprocess.run(
            [sys.executable, str(here / "random_llama.py"), str(ckpt), "--shape", args.shape, "--dtype", "bf16"],
            check=True,
        )
        ckpt_mib = sum(p.stat().st_size for p in ckpt.glob("*.safetensors")) / 2**20
        float_ref = root / "fp32"
        subprocess.run(
            ["gqa-export", "build", str(ckpt), "-o", str(float_ref), "-p", "fp32", "--no-smoke", "-q"], check=True
        )
        vocab = json.loads((float_ref / "genai_config.json").read_text())["model"]["vocab_size"]
        runs = {
            "gqa-export int4 rtn": ["gqa-export", "build", str(ckpt), "-o", str(root / "ours"), "-p", "int4",
                                    "--block-size", str(args.block_size), "--no-smoke", "-q"],
            "gqa-export int4 search": ["gqa-export", "build", str(ckpt), "-o", str(root / "ours-search"), "-p", "int4",
                                       "--block-size", str(args.block_size), "--quant-method", "search",
                                       "--no-smoke", "-q"],
            "official builder int4": [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt),
                                      "-o", str(root / "builder"), "-p", "int4", "-e", "cpu", "-c", str(root / "cache"),
                                      "--extra_options", f"int4_block_size={args.block_size}"],
        }  # fmt: skip
        folders = {"gqa-export int4 rtn": root / "ours", "gqa-export int4 search": root / "ours-search",
                   "official builder int4": root / "builder"}  # fmt: skip
        # Every export runs before this process loads any model: a child forked from a big parent
        # reports the parent's pages in its own peak RSS.
        measured = {name: timed(cmd) for name, cmd in runs.items()}
        rows = []
        for name in runs:
            seconds, peak = measured[name]
            error = logit_error(float_ref, folders[name], vocab)
            speed = float(subprocess.run([sys.executable, "-c", SPEED, str(folders[name])], check=True,
                                         capture_output=True, text=True).stdout.strip().splitlines()[-1])  # fmt: skip
            rows.append(
                f"| {name} | {folder_mib(folders[name]):.0f} MiB | {seconds:.1f} s "
                f"| {peak:.0f} MiB ({peak / ckpt_mib:.2f}x) "
                f"| {error['relative_l2']:.4f} | {error['next_token_agreement']:.3f} | {speed:.1f} |"
            )
            print(rows[-1], flush=True)
    table = (
        f"\n## {date.today()}: {args.shape} random Llama (bf16 checkpoint, {ckpt_mib:.0f} MiB), int4 block "
        f"{args.block_size}, CPU ({platform.machine()})\n\n"
        "| exporter | model size | export time | peak RSS (x checkpoint) | logit rel. L2 vs fp32 "
        "| next-token agreement | decode tok/s |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# int4: gqa-export vs the official ORT GenAI model builder\n")
    with RESULTS.open("a") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
