"""GGUF input at the 1B shape: export memory and size, and speed beside llama.cpp on the same file.

    python benchmarks/gguf_bench.py WORK [--threads 1,2] [--prompt 512] [--new 64] [--skip-builder]

WORK holds llama1b-F16.gguf, llama1b-Q4_0.gguf and llama1b-Q4_K_M.gguf (benchmarks/random_llama.py
--shape 1b, then llama.cpp's converter to F16 and its quantizer: see benchmarks/results/gguf.md),
and benchmarks/llama_cpp_env.sh's venv must exist (tests/llama_cpp_env.py finds it). Measured:
- export: `gqa-export build FILE` (default precision: the file's integer blocks, accuracy level 4)
  and `-p int4`, wall time and peak RSS of the process (wait4), package bytes against the file's;
  beside it, peak RSS of transformers' dequantizing load of the Q4_K_M file and of the official
  builder's GGUF path on the F16 file (it reads float GGUFs only);
- speed: a PROMPT-token prefill and NEW greedy tokens of the default package through
  onnxruntime-genai (intra_op_num_threads T) and of llama.cpp (n_threads T) on the same file.
Appends a section to benchmarks/results/gguf.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "gguf.md"
sys.path.insert(0, str(REPO / "tests"))


def measured(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one process; its stderr's tail printed when it fails."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code:
            err.seek(0)
            print(err.read().decode(errors="replace")[-3000:], file=sys.stderr)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, code


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


GENAI = """
import json, sys, time
import numpy as np
import onnxruntime_genai as og
package, threads, prompt, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = og.Config(package)
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
model = og.Model(config)
ids = (np.arange(prompt) * 7919 % 30000 + 100).astype(np.int32)
def run(n):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=prompt + n, min_length=prompt + n)
    g = og.Generator(model, params)
    t = time.perf_counter(); g.append_tokens(ids); prefill = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n):
        g.generate_next_token()
    return prefill, time.perf_counter() - t
run(2)  # warm-up: session creation and the first prefill's allocations
prefill, decode = run(new)
print(json.dumps({"prefill_s": prefill, "decode_s": decode}))
"""


def genai_speed(package: Path, threads: int, prompt: int, new: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", GENAI, str(package), str(threads), str(prompt), str(new)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def llama_speed(path: Path, threads: int, prompt: int, new: int) -> dict[str, float]:
    from llama_cpp_env import run

    ids = [int(i) for i in (__import__("numpy").arange(prompt) * 7919 % 30000 + 100)]
    job = {"job": "speed", "model": str(path), "prompt": ids, "new": new, "threads": threads}
    run(job)  # warm-up: the file in the page cache, the first allocations
    return run(job, timeout=3600)


TRANSFORMERS = """
import sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
p = Path(sys.argv[1])
AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--skip-builder", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    lines = [f"\n## {time.strftime('%Y-%m-%d')} — 1B shape (Llama-3.2-1B's, random weights), {os.cpu_count()} cores\n"]
    lines.append("| file | file bytes | build | wall s | peak RSS MiB | package bytes | package / file |")
    lines.append("|---|---|---|---|---|---|---|")
    packages = {}
    for kind in ("Q4_0", "Q4_K_M"):
        gguf = work / f"llama1b-{kind}.gguf"
        for label, extra in (("default", []), ("-p int4", ["-p", "int4"])):
            out = work / f"pkg-{kind}-{label.replace(' ', '').replace('-', '')}"
            cmd = [sys.executable, "-m", "gqa_export", "build", str(gguf), "-o", str(out), "--no-smoke", "-q",
                   "--overwrite", *extra]  # fmt: skip
            wall, rss, code = measured(cmd, env)
            assert code == 0, cmd
            size, file_size = folder_bytes(out), gguf.stat().st_size
            lines.append(f"| {gguf.name} | {file_size:,} | {label} | {wall:.0f} | {rss:.0f} | {size:,} | "
                         f"{size / file_size:.2f} |")  # fmt: skip
            packages[(kind, label)] = out
    wall, rss, code = measured([sys.executable, "-c", TRANSFORMERS, str(work / "llama1b-Q4_K_M.gguf")])
    lines.append(f"| llama1b-Q4_K_M.gguf | | transformers' dequantizing load (fp32) | {wall:.0f} | {rss:.0f} | | |")
    if not args.skip_builder:
        out = work / "builder-f16"
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(work / "llama1b"),
               "-i", str(work / "llama1b-F16.gguf"), "-o", str(out), "-p", "fp32", "-e", "cpu",
               "-c", str(work / "builder-cache")]  # fmt: skip
        subprocess.run(["rm", "-rf", str(out)], check=True)
        wall, rss, code = measured(cmd, cwd=work)
        lines.append(f"| llama1b-F16.gguf | {(work / 'llama1b-F16.gguf').stat().st_size:,} | official builder (fp32, "
                     f"float GGUF only) | {wall:.0f} | {rss:.0f} | exit {code} | |")  # fmt: skip
    lines.append(f"\nSpeed: {args.prompt}-token prefill, {args.new} greedy tokens; onnxruntime-genai runs the default "
                 "package (the file's blocks, accuracy level 4), llama.cpp the same file.\n")  # fmt: skip
    lines.append(
        "| file | threads | ours prefill tok/s | llama.cpp prefill tok/s | ours decode tok/s | llama.cpp decode tok/s |"
    )
    lines.append("|---|---|---|---|---|---|")
    for kind in ("Q4_0", "Q4_K_M"):
        for threads in (int(t) for t in args.threads.split(",")):
            ours = genai_speed(packages[(kind, "default")], threads, args.prompt, args.new)
            theirs = llama_speed(work / f"llama1b-{kind}.gguf", threads, args.prompt, args.new)
            lines.append(
                f"| {kind} | {threads} | {args.prompt / ours['prefill_s']:.1f} "
                f"| {args.prompt / theirs['prefill_s']:.1f} | {args.new / ours['decode_s']:.2f} "
                f"| {args.new / theirs['decode_s']:.2f} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    with RESULTS.open("a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
