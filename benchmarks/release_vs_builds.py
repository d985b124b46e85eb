"""A four-variant `gqa-export release` vs four separate `gqa-export build` runs, side by side.

    python benchmarks/release_vs_builds.py [--shape 1b|150m] [--checkpoint DIR]

Both sides export the same variants (cpu fp32, cpu int4, cuda fp16, cuda int4; the CUDA ones are
smoke-run on CPU here) from the same random-weight checkpoint with SOURCE_DATE_EPOCH set, so their
packages must come out byte-identical (checked). Wall time and peak RSS come from wait4() on each
process; the page cache is warmed first so neither side pays the first disk read alone. Also
measured: reading every tensor once from the memory-mapped shards, the most a read-once fan-out
could save per extra variant. Results go to benchmarks/results/release.md.
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

from gqa_export.package.manifest import sha256_file
from gqa_export.quant.quantize import QuantOptions
from gqa_export.release import folder_name

RESULTS = Path(__file__).parent / "results" / "release.md"
VARIANTS = [("cpu", "fp32"), ("cpu", "int4"), ("cuda", "fp16"), ("cuda", "int4")]
ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
READ_ALL = """
import sys, time
from pathlib import Path
from gqa_export.source.weights import WeightStore
store = WeightStore.open(Path(sys.argv[1]))
start = time.perf_counter()
total = sum(store.read(name).nbytes for name in store.names())  # every tensor once
print(f"{time.perf_counter() - start:.3f} {total}")
"""


def measure(cmd: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of one process."""
    os.sync()  # the previous run's dirty pages are written back before this one starts
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=ENV)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {status}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024


def files(root: Path) -> dict[str, str]:
    """sha256 per file, streamed: this process must stay small, since a child forked from it
    starts with its resident pages counted in the child's peak RSS."""
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="1b")
    parser.add_argument("--checkpoint", type=Path, help="reuse this checkpoint instead of writing one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        work = Path(tmp)
        ckpt = args.checkpoint
        if ckpt is None:
            ckpt = work / "ckpt"
            script = Path(__file__).parent / "random_llama.py"
            subprocess.run([sys.executable, str(script), str(ckpt), "--shape", args.shape], check=True)
        for shard in ckpt.glob("*.safetensors"):  # warm the page cache for both sides
            with shard.open("rb") as f:
                while f.read(1 << 26):
                    pass
        read = subprocess.run([sys.executable, "-c", READ_ALL, str(ckpt)], capture_output=True, text=True, check=True)
        read_seconds = float(read.stdout.split()[0])

        spec = work / "release.yaml"
        lines = [f"source: {ckpt}", "license: apache-2.0", "variants:"]
        lines += [f"  - {{ep: {ep}, precision: {precision}}}" for ep, precision in VARIANTS]
        spec.write_text("\n".join(lines) + "\n")
        release_seconds, release_peak = measure(["gqa-export", "release", str(spec), "-o", str(work / "rel"), "-q"])
        released = files(work / "rel")
        release_bytes = sum(p.stat().st_size for p in (work / "rel").rglob("*") if p.is_file())
        shutil.rmtree(work / "rel")

        build_rows, identical = [], True
        for ep, precision in VARIANTS:
            out = work / f"build-{ep}-{precision}"
            command = ["gqa-export", "build", str(ckpt), "-o", str(out), "--ep", ep, "-p", precision, "-q"]
            seconds, peak = measure(command)
            folder = folder_name(ep, precision, QuantOptions())
            identical &= all(released.get(f"{folder}/{name}") == data for name, data in files(out).items())
            build_rows.append((ep, precision, seconds, peak))
            shutil.rmtree(out)
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))

    builds_seconds = sum(r[2] for r in build_rows)
    builds_peak = max(r[3] for r in build_rows)
    mib = 2**20
    table = [
        f"## {date.today()}: {args.shape} checkpoint ({ckpt_bytes / mib:.0f} MiB bf16), "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "",
        "| run | wall time | peak RSS |",
        "|---|---|---|",
        *[f"| build {ep} {p} | {s:.1f} s | {peak / mib:.0f} MiB |" for ep, p, s, peak in build_rows],
        f"| **four builds** | **{builds_seconds:.1f} s** | **{builds_peak / mib:.0f} MiB** (max) |",
        f"| **release (4 variants)** | **{release_seconds:.1f} s** | **{release_peak / mib:.0f} MiB** |",
        "",
        f"- release / builds: time {release_seconds / builds_seconds:.2f}x, peak {release_peak / builds_peak:.2f}x; "
        f"release size {release_bytes / mib:.0f} MiB; packages byte-identical to the builds': {identical}",
        f"- reading every tensor once from the page-cached shards: {read_seconds:.2f} s "
        f"({read_seconds / (builds_seconds / len(VARIANTS)):.1%} of an average variant)",
        "",
    ]
    text = "\n".join(table)
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# gqa-export release vs separate builds\n\n"
            "`python benchmarks/release_vs_builds.py --shape 1b`: four variants (cpu fp32, cpu int4, cuda fp16, "
            "cuda int4; smoke runs on, the CUDA packages smoke-run on CPU) from one release vs four `build` runs. "
            "Peak RSS per process from wait4().\n\n"
        )
    with RESULTS.open("a") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
