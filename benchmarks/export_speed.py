"""Export time and peak memory of gqa-export vs the official builder vs the copy limit, in one run.

    python benchmarks/export_speed.py [--shapes 150m,1b,8b] [--no-builder] [--builder-timeout 1800]

For every shape a random-weight bf16 Llama checkpoint is written (or reused from --work DIR), then:
- the copy limit: read every shard, write the bytes to a new file, sync (what any exporter must pay
  at least to turn the checkpoint's bytes into a package's);
- `gqa-export build --no-smoke` for cuda fp16, cpu fp32 and cpu int4 (rtn, block 32), and the
  official builder (`python -m onnxruntime_genai.models.builder`, same precision and block size).
Every time includes a final `sync` (the package is on disk, like the copy). Peak RSS and CPU time
come from wait4() on each process (the parent stays small: a forked child starts with the parent's
pages counted); CPU utilization is (user + system) / wall, 200% = both cores. The builder is stopped
when its RSS would exhaust this machine (RAM - 2 GiB) or at the timeout, and reported as such.
The page cache holds what the previous run left; each run starts after a sync.
Results are appended to benchmarks/results/export_speed.md.
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
from dataclasses import dataclass
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "export_speed.md"
MIB = 2**20
TARGETS = {  # name -> (gqa-export arguments, builder arguments)
    "cuda fp16": (["--ep", "cuda", "-p", "fp16"], ["-e", "cuda", "-p", "fp16"]),
    "cpu fp32": (["--ep", "cpu", "-p", "fp32"], ["-e", "cpu", "-p", "fp32"]),
    "cpu int4": (["--ep", "cpu", "-p", "int4", "--block-size", "32"],
                 ["-e", "cpu", "-p", "int4", "--extra_options", "int4_block_size=32", "int4_accuracy_level=4"]),
}  # fmt: skip
SHAPE_TARGETS = {"150m": list(TARGETS), "1b": list(TARGETS), "8b": ["cuda fp16", "cpu int4"]}


@dataclass
class Run:
    seconds: float
    peak: int  # bytes
    cpu: float  # (user + system) / wall
    status: str = "ok"


def measure(cmd: list[str], memory_cap: int | None = None, timeout: float | None = None) -> Run:
    """Run to completion (then sync), or stop it at the memory cap or timeout."""
    os.sync()
    log = tempfile.TemporaryFile(mode="w+")  # a pipe would fill up with the builder's logging and block it
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    status, usage = "ok", None
    while usage is None:
        pid, code, ru = os.wait4(child.pid, os.WNOHANG)
        if pid:
            usage = ru
            if code != 0:
                status = f"failed (exit status {code >> 8 or code})"
            break
        elapsed = time.perf_counter() - start
        rss = _rss(child.pid)
        if memory_cap is not None and rss > memory_cap:
            child.kill()
            status = f"stopped at {rss / 2**30:.1f} GiB RSS (this machine has {_ram() / 2**30:.0f} GiB)"
        elif timeout is not None and elapsed > timeout:
            child.kill()
            status = f"stopped after {timeout:.0f} s"
        time.sleep(0.2)
    os.sync()
    seconds = time.perf_counter() - start
    if status != "ok":
        log.seek(0)
        print(f"{cmd[:4]}: {status}\n{log.read()[-2000:]}", file=sys.stderr)
    log.close()
    return Run(seconds, usage.ru_maxrss * 1024, (usage.ru_utime + usage.ru_stime) / seconds, status)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def copy_limit(ckpt: Path, work: Path) -> float:
    """Read every shard, write it to a new file, sync: seconds."""
    target = work / "copy"
    target.mkdir(exist_ok=True)
    os.sync()
    start = time.perf_counter()
    for shard in sorted(ckpt.glob("*.safetensors")):
        with shard.open("rb") as src, (target / shard.name).open("wb") as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
    os.sync()
    seconds = time.perf_counter() - start
    shutil.rmtree(target)
    return seconds


def package_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="150m,1b,8b")
    parser.add_argument("--work", type=Path, default=Path.home() / "export-speed", help="checkpoints are kept here")
    parser.add_argument("--no-builder", action="store_true")
    parser.add_argument("--builder-timeout", type=float, default=1800)
    args = parser.parse_args()
    cap = _ram() - 2 * 2**30
    sections = []
    for shape in args.shapes.split(","):
        work = args.work / shape
        ckpt = work / "ckpt"
        if not (ckpt / "config.json").is_file():
            subprocess.run([sys.executable, str(HERE / "random_llama.py"), str(ckpt), "--shape", shape], check=True)
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
        copy = copy_limit(ckpt, work)
        rows = []
        for target in SHAPE_TARGETS[shape]:
            ours_args, builder_args = TARGETS[target]
            out = work / "ours"
            ours = measure(["gqa-export", "build", str(ckpt), "-o", str(out), "--no-smoke", "-q", "--overwrite",
                            *ours_args], memory_cap=cap)  # fmt: skip
            size = package_bytes(out) if ours.status == "ok" else 0
            shutil.rmtree(out, ignore_errors=True)
            builder = None
            if not args.no_builder:
                bout, cache = work / "builder", work / "builder-cache"
                builder = measure([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt),
                                   "-o", str(bout), "-c", str(cache), *builder_args],
                                  memory_cap=cap, timeout=args.builder_timeout)  # fmt: skip
                shutil.rmtree(bout, ignore_errors=True)
                shutil.rmtree(cache, ignore_errors=True)
            rows.append(_row(shape, target, ckpt_bytes, size, copy, ours, builder))
            print(rows[-1], flush=True)
        sections.append((shape, ckpt_bytes, copy, rows))
    _write(sections)


def _row(shape: str, target: str, ckpt: int, size: int, copy: float, ours: Run, builder: Run | None) -> str:
    ours_cell = (
        f"{ours.seconds:.1f} s ({ours.seconds / copy:.2f}x copy), {ours.peak / MIB:.0f} MiB "
        f"({ours.peak / ckpt:.3f}x), CPU {ours.cpu:.0%}"
        if ours.status == "ok"
        else ours.status
    )
    if builder is None:
        builder_cell, ratio = "not run", ""
    elif builder.status == "ok":
        builder_cell = (
            f"{builder.seconds:.1f} s, {builder.peak / MIB:.0f} MiB ({builder.peak / ckpt:.2f}x), CPU {builder.cpu:.0%}"
        )
        ratio = f"{ours.seconds / builder.seconds:.2f}x" if ours.status == "ok" else ""
    else:
        builder_cell, ratio = f"{builder.status} after {builder.seconds:.0f} s", ""
    return f"| {shape} | {target} | {size / MIB:.0f} MiB | {ours_cell} | {builder_cell} | {ratio} |"


def _write(sections: list[tuple[str, int, float, list[str]]]) -> None:
    lines = [
        f"## {date.today()}: {platform.machine()}, {os.cpu_count()} cores, {_ram() / 2**30:.0f} GiB RAM, "
        f"Python {sys.version.split()[0]}",
        "",
        "| shape | checkpoint (bf16) | copy limit (read + write + sync) |",
        "|---|---|---|",
        *[f"| {s} | {b / MIB:.0f} MiB | {c:.1f} s ({b / MIB / c:.0f} MiB/s) |" for s, b, c, _ in sections],
        "",
        "| shape | target | package | gqa-export: time (x copy limit), peak RSS (x checkpoint), CPU "
        "| official builder: time, peak RSS, CPU | gqa-export / builder time |",
        "|---|---|---|---|---|---|",
        *[row for *_, rows in sections for row in rows],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Export speed: gqa-export vs the official builder vs the copy limit\n\n" + __doc__.split("\n\n", 1)[1]
        )
    with RESULTS.open("a") as f:
        f.write("\n" + text)


if __name__ == "__main__":
    main()
