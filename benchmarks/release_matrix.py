"""A 6-variant release on one machine vs the same release as three parallel parts + assemble.

    python benchmarks/release_matrix.py [--shape 150m] [--checkpoint DIR] [--jobs 3]

One machine: `gqa-export release SPEC -o one`. Matrix: `--jobs` processes started together, each
`gqa-export release SPEC --variant A --variant B -o parts/pN` (the variants dealt round-robin),
then `gqa-export release assemble SPEC parts/* -o two`. Both with SOURCE_DATE_EPOCH; the two
releases must be byte-identical (checked) and the assembled one must pass `verify`. Also measured:
the local source's content hash every part records (release/parts.py), alone. The page cache is
warmed first. Results go to benchmarks/results/release_matrix.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from gqa_export.package.manifest import sha256_file

RESULTS = Path(__file__).parent / "results" / "release_matrix.md"
EVAL_TEXT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tiny-text" / "eval.txt"
VARIANTS = [
    "{ep: cpu, precision: fp32}",
    "{ep: cpu, precision: int4, gate: {max_ppl_increase: 1000000}}",
    "{ep: cpu, precision: int8}",
    "{ep: cuda, precision: fp16}",
    "{ep: cuda, precision: int4}",
    "{ep: cuda, precision: int4, block_size: 128}",
]
ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
CLI = [sys.executable, "-m", "gqa_export"]
PIN = """
import sys, time
from pathlib import Path
from gqa_export.release.parts import source_pin
from gqa_export.source.fetch import resolve_source
start = time.perf_counter()
source_pin(resolve_source(sys.argv[1]))
print(f"{time.perf_counter() - start:.3f}")
"""


def timed(commands: list[list[str]]) -> float:
    """Wall seconds for `commands` started together, all waited for."""
    os.sync()
    start = time.perf_counter()
    children = [subprocess.Popen(cmd, env=ENV) for cmd in commands]
    for child, cmd in zip(children, commands, strict=True):
        if child.wait() != 0:
            raise SystemExit(f"{' '.join(cmd)} failed with status {child.returncode}")
    return time.perf_counter() - start


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--checkpoint", type=Path, help="reuse this checkpoint instead of writing one")
    parser.add_argument("--jobs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        work = Path(tmp)
        ckpt = args.checkpoint
        if ckpt is None:
            ckpt = work / "ckpt"
            script = Path(__file__).parent / "random_llama.py"
            subprocess.run([sys.executable, str(script), str(ckpt), "--shape", args.shape], check=True)
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
        for shard in ckpt.glob("*.safetensors"):  # warm the page cache for both sides
            with shard.open("rb") as f:
                while f.read(1 << 26):
                    pass
        spec = work / "release.yaml"
        lines = [f"source: {ckpt}", "license: apache-2.0", f"eval: {{text: {EVAL_TEXT}, window: 128, max_tokens: 512}}"]
        spec.write_text("\n".join([*lines, "variants:", *(f"  - {v}" for v in VARIANTS)]) + "\n")
        listed = subprocess.run([*CLI, "release", str(spec), "--list"], env=ENV, capture_output=True, text=True)
        paths = [e["variant"] for e in __import__("json").loads(listed.stdout)["include"]]
        load_before = os.getloadavg()

        one = timed([[*CLI, "release", str(spec), "-o", str(work / "one"), "-q"]])
        groups = [paths[i :: args.jobs] for i in range(args.jobs)]
        parts = [work / "parts" / f"p{i}" for i in range(args.jobs)]
        part_commands = [
            [*CLI, "release", str(spec), *(a for p in group for a in ("--variant", p)), "-o", str(part), "-q"]
            for group, part in zip(groups, parts, strict=True)
        ]
        parallel = timed(part_commands)
        # each part alone, as on a runner of its own: the matrix's critical path is the slowest
        alone = [timed([[*cmd[:-2], str(work / "alone" / f"p{i}"), "-q"]]) for i, cmd in enumerate(part_commands)]
        assemble = timed([[*CLI, "release", "assemble", str(spec), *map(str, parts), "-o", str(work / "two"), "-q"]])
        verify = subprocess.run([*CLI, "verify", str(work / "two")], env=ENV, capture_output=True, text=True)
        load_after = os.getloadavg()
        identical = files(work / "one") == files(work / "two")
        pin = float(subprocess.run([sys.executable, "-c", PIN, str(ckpt)], capture_output=True, text=True,
                                   check=True, env=ENV).stdout)  # fmt: skip
        size = sum(p.stat().st_size for p in (work / "one").rglob("*") if p.is_file())

    matrix = parallel + assemble
    row = [
        f"## {date.today()}: {args.shape} checkpoint ({ckpt_bytes / 2**20:.0f} MiB), {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "",
        "| run | wall time |",
        "|---|---|",
        f"| one machine: `release SPEC -o one` (6 variants) | {one:.1f} s |",
        f"| {args.jobs} parts in parallel (`--variant` x2 each) | {parallel:.1f} s |",
        f"| `release assemble` (hash every part's files, link, write the root) | {assemble:.1f} s |",
        f"| **matrix total, parts sharing this machine** | **{matrix:.1f} s** |",
        *(
            f"| part p{i} alone ({', '.join(g)}) | {t:.1f} s |"
            for i, (g, t) in enumerate(zip(groups, alone, strict=True))
        ),
        f"| **matrix on one runner per part: slowest part + assemble** | **{max(alone) + assemble:.1f} s** |",
        "",
        f"- sharing this machine: matrix / one machine {matrix / one:.2f}x, assemble's share {assemble / matrix:.1%}; "
        f"one runner per part: {(max(alone) + assemble) / one:.2f}x of one machine, assemble's share "
        f"{assemble / (max(alone) + assemble):.1%}; release size {size / 2**20:.0f} MiB",
        f"- assembled release byte-identical to the one-machine release: {identical}; "
        f"verify: {'ok' if verify.returncode == 0 else 'FAILED'}",
        f"- each part's content hash of the local source (sha256 of every file): {pin:.2f} s",
        f"- load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f}",
        "",
    ]
    text = RESULTS.read_text() if RESULTS.exists() else _HEADER
    RESULTS.write_text(text + "\n".join(row) + "\n")
    print("\n".join(row))


_HEADER = """# A release on a CI matrix vs one machine

`python benchmarks/release_matrix.py --shape 150m`: six variants (cpu fp32/int4/int8, cuda fp16/int4/
int4 block 128; eval on 512 tokens, one gate) of a random-weight checkpoint, as one `release` process
vs three parallel `release --variant` processes (two variants each) + `release assemble`.

"""


if __name__ == "__main__":
    main()
