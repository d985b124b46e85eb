"""A pre-quantized GPTQ import, gqa-export against the official ORT GenAI model builder, in one run.

    python benchmarks/prequant_vs_builder.py [--shape gptq-150m|gptq-act-150m|gptq-1b]

benchmarks/random_gptq.py writes a GPTQ v1 4-bit checkpoint (group 128) and its dequantized fp32
twin. Each exporter then runs on the quantized checkpoint in its own process (wall time, peak RSS
from wait4): gqa-export at fp32 and int4 (the GPTQ linears keep their integers either way; the
target applies to the lm_head), the builder at int4 (with its lm_head quantized, and left float
with `nodes_to_exclude=/lm_head/MatMul accuracy_level=1`, as gqa-export fp32 builds it) and fp32
(`-i <checkpoint>`: it reads the quantization_config itself). A refusal or crash is recorded with
its last error line. Accuracy: prompt logits through onnxruntime-genai (CPU) on two 48-token
prompts against HF transformers running the twin in fp32 (max abs diff, next-token agreement).
Appends to benchmarks/results/prequant_vs_builder.md.
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

import numpy as np

RESULTS = Path(__file__).parent / "results" / "prequant_vs_builder.md"


def timed(cmd: list[str]) -> tuple[float, float, str | None]:
    """Wall seconds, peak RSS MiB of the child alone, and its last error line when it failed."""
    with tempfile.TemporaryFile() as log:  # a file: an unread pipe fills up and blocks the child
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        error = None
        if status != 0:
            log.seek(0)
            lines = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
            error = lines[-1][:300] if lines else f"status {status}"
        return seconds, usage.ru_maxrss / 1024, error


def package_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file() and p.suffix in (".onnx", ".data")) / 2**20


def twin_logits(twin: Path, prompts: list[list[int]]) -> list[np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(twin, dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(torch.tensor([p])).logits[0].numpy() for p in prompts]


def main() -> None:
    from gqa_export.runtime.logit_error import fixed_prompts, prompt_logits

    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="gptq-150m")
    args = parser.parse_args()
    here = Path(__file__).parent
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        root = Path(tmp)
        ckpt, twin = root / "ckpt", root / "twin"
        subprocess.run([sys.executable, str(here / "random_gptq.py"), str(ckpt), "--shape", args.shape,
                        "--twin", str(twin)], check=True)  # fmt: skip
        ckpt_mib = sum(p.stat().st_size for p in ckpt.glob("*.safetensors")) / 2**20
        builder = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-e", "cpu",
                   "-c", str(root / "cache")]  # fmt: skip
        runs = {
            "gqa-export fp32": ["gqa-export", "build", str(ckpt), "-o", str(root / "ours-fp32"), "-p", "fp32",
                                "--no-smoke", "-q"],
            "gqa-export int4": ["gqa-export", "build", str(ckpt), "-o", str(root / "ours-int4"), "-p", "int4",
                                "--no-smoke", "-q"],
            "builder int4": [*builder, "-o", str(root / "builder-int4"), "-p", "int4"],
            # as gqa-export fp32 builds it (lm_head float, fp32 activations in MatMulNBits): only the
            # imported linears differ
            "builder int4, lm_head float, accuracy_level 1": [
                *builder, "-o", str(root / "builder-int4-head"), "-p", "int4", "--extra_options",
                "nodes_to_exclude=/lm_head/MatMul", "accuracy_level=1"],
            "builder fp32": [*builder, "-o", str(root / "builder-fp32"), "-p", "fp32"],
        }  # fmt: skip
        folders = {name: Path(cmd[cmd.index("-o") + 1]) for name, cmd in runs.items()}
        # Every export runs before this process loads a model: a child forked from a big parent
        # reports the parent's pages in its own peak RSS.
        measured = {name: timed(cmd) for name, cmd in runs.items()}
        vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
        prompts = fixed_prompts(vocab)[:2]
        reference = twin_logits(twin, prompts)
        rows = []
        for name in runs:
            seconds, peak, error = measured[name]
            if error is None:
                try:
                    got = prompt_logits(folders[name], prompts)
                    diff = max(float(np.abs(g - r).max()) for g, r in zip(got, reference, strict=True))
                    agree = np.mean(
                        [float((g.argmax(-1) == r.argmax(-1)).mean()) for g, r in zip(got, reference, strict=True)]
                    )
                    accuracy = f"{diff:.2e} | {agree:.3f}"
                except Exception as exc:  # a package that does not run is a result
                    accuracy = f"does not run: {str(exc).splitlines()[0][:200]} | -"
                size = f"{package_mib(folders[name]):.0f} MiB"
            else:
                accuracy, size = f"failed: `{error}` | -", "-"
            rows.append(f"| {name} | {size} | {seconds:.1f} s | {peak:.0f} MiB ({peak / ckpt_mib:.2f}x) | {accuracy} |")
            print(rows[-1], flush=True)
    table = (
        f"\n## {date.today()}: {args.shape} (GPTQ v1 4-bit, group 128, {ckpt_mib:.0f} MiB), CPU "
        f"({platform.machine()}, {os.cpu_count()} cores shared)\n\n"
        "| exporter | package size | export time | peak RSS (x checkpoint) | max abs logit diff vs HF twin "
        "| next-token agreement |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Pre-quantized GPTQ import: gqa-export vs the official ORT GenAI model builder\n\n"
            "Written by benchmarks/prequant_vs_builder.py; docs/prequantized.md §8 reads these rows.\n"
        )
    with RESULTS.open("a") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
