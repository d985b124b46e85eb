"""Export time and peak memory of `gqa-export build` vs the checkpoint size.

    python benchmarks/export_memory.py [--shape 150m|1b|qwen3_5-230m|deepseek_v3-1g|qwen3_vl-vit1152
                                        |gptq-150m|gptq-act-150m|gptq-1b]
                                       [--precision fp32|fp16|int4]
                                       [--ep cpu|cuda]

Peak RSS of the whole build process (fetch -> package, smoke run off) comes from wait4() on that
one process. The result is appended to benchmarks/results/export_memory.md. The Llama shapes are
written by benchmarks/random_llama.py, the hybrid one (a Qwen3.5 text decoder: gated-DeltaNet
layers with a conv and a recurrent state, every fourth layer gated attention) by
benchmarks/random_hybrid.py, the mixture of experts (DeepSeek-V3's 256 routed experts, top 8 in
grouped routing, 1 shared expert, dense first layers, latent attention, on a 512 hidden size) by
benchmarks/random_deepseek.py, the multimodal one (Qwen3-VL-8B's vision tower with its deepstack
mergers in front of a small text decoder; the build writes vision.onnx, embedding.onnx and the
decoder) by benchmarks/random_vlm.py, the pre-quantized ones (GPTQ v1 4-bit, group 128, `act` with
desc_act's permuted groups) by benchmarks/random_gptq.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "export_memory.md"
# the maker of each shape that benchmarks/random_llama.py does not write
MAKERS = {
    "qwen3_5-230m": "random_hybrid.py",
    "deepseek_v3-1g": "random_deepseek.py",
    "qwen3_vl-vit1152": "random_vlm.py",
    "gptq-150m": "random_gptq.py",
    "gptq-act-150m": "random_gptq.py",
    "gptq-1b": "random_gptq.py",
}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--ep", default="cpu")
    parser.add_argument("--dtype", default="bf16", help="checkpoint dtype")
    parser.add_argument("--encoder-precision", default=None, help="a multimodal shape's vision model: float|int8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        # The checkpoint is written by a separate process: a child forked from a parent that held
        # big arrays would report the parent's pages in its own peak RSS.
        ckpt = Path(tmp) / "ckpt"
        maker = MAKERS.get(args.shape, "random_llama.py")
        script = Path(__file__).parent / maker
        subprocess.run(
            [sys.executable, str(script), str(ckpt), "--shape", args.shape, "--dtype", args.dtype], check=True
        )
        out = Path(tmp) / "pkg"
        cmd = ["gqa-export", "build", str(ckpt), "-o", str(out), "--ep", args.ep, "--precision", args.precision,
               "--no-smoke", "-q"]  # fmt: skip
        if args.encoder_precision:
            cmd += ["--encoder-precision", args.encoder_precision]
        start = time.perf_counter()
        child = subprocess.Popen(cmd)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not all children's
        seconds = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"gqa-export failed with status {status}")
        peak = usage.ru_maxrss * 1024
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
        pkg_bytes = folder_bytes(out)
        shutil.rmtree(out)
    encoders = f", vision {args.encoder_precision}" if args.encoder_precision else ""
    row = (
        f"| {date.today()} | {args.shape} {args.dtype} | {args.ep} {args.precision}{encoders} "
        f"| {ckpt_bytes / 2**20:.0f} MiB "
        f"| {pkg_bytes / 2**20:.0f} MiB | {peak / 2**20:.0f} MiB | {peak / ckpt_bytes:.2f}x | {seconds:.1f} s |"
    )
    print(row)
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# gqa-export build: peak memory and time\n\n"
            f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {sys.version.split()[0]}. "
            "Peak RSS of the whole CLI process (python, onnx, onnxruntime and transformers imports included).\n\n"
            "| date | checkpoint | target | checkpoint size | package size | peak RSS | peak / checkpoint | time |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
    with RESULTS.open("a") as f:
        f.write(row + "\n")


if __name__ == "__main__":
    main()
