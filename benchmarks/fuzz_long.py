"""The long fuzz run by hand (issue #36): every fuzzed parser of tests/fuzz with many more inputs.

    python benchmarks/fuzz_long.py [--scale 1.0] [--part K/N] [--log FILE] [--write-results]
    python benchmarks/fuzz_long.py --report LOG [LOG ...] --write-results

The suite runs tests/fuzz with a few dozen derandomized inputs per test; this runs each file with
`GQA_FUZZ_SCALE` times as many random ones (the fast parsers get the larger factors), sums the
inputs each parser saw (tests/fuzz/conftest.py writes them) and, with --write-results, writes the
table to benchmarks/results/fuzz_long.md. `--part 1/2` and `--part 2/2` split the pieces between
two processes, each appending to its `--log`; `--report` tabulates the logs together.
A failure is a traceback or a multi-line error: fix it in gqa_export/ with a regression test.
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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "fuzz_long.md"
# (file, GQA_FUZZ_SCALE) pieces at --scale 1, ~100,000 inputs in all, the cheap parsers most; run in
# pieces so that an interrupted run still has the counts of the pieces it finished
SAFETENSORS, YAML, GGUF = (f"tests/fuzz/test_fuzz_{n}.py" for n in ("safetensors", "yaml", "gguf"))
PLAN = [
    (SAFETENSORS, 70),  # 180 inputs a scale
    (GGUF, 75),  # 80
    (SAFETENSORS, 70),
    ("tests/fuzz/test_fuzz_config.py", 15),  # 33 (3 builds)
    (SAFETENSORS, 70),
    ("tests/fuzz/test_fuzz_package_files.py", 15),  # 53
    (SAFETENSORS, 70),
    (GGUF, 75),
    (SAFETENSORS, 70),
    (YAML, 50),  # 168 (8 through `release`)
    (SAFETENSORS, 50),
]


def run(file: str, scale: int) -> tuple[int, dict[str, int], float, str]:
    with tempfile.TemporaryDirectory(prefix="fuzz-long-") as folder:
        counts_file = Path(folder) / "counts.tsv"
        env = {**os.environ, "GQA_FUZZ_SCALE": str(scale), "GQA_FUZZ_COUNTS": str(counts_file)}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", file, "-q", "-p", "no:cacheprovider", "-o", "addopts="],
            cwd=ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        seconds = time.monotonic() - start
        counts = {}
        if counts_file.exists():
            for line in counts_file.read_text().splitlines():
                name, count = line.split("\t")
                counts[name] = int(count)
    tail = "\n".join(done.stdout.splitlines()[-40:])
    return done.returncode, counts, seconds, tail


def _table(scale: float, totals: dict[str, int], rows: list[str], failed: list[str]) -> str:
    total = sum(totals.values())
    verdict = "no failure" if not failed else "failures in " + ", ".join(failed)
    return "\n".join(
        [
            "# Long fuzz run (issue #36)",
            "",
            f"`python benchmarks/fuzz_long.py --scale {scale:g} --write-results`: **{total} inputs**, {verdict}.",
            "",
            "| file | GQA_FUZZ_SCALE | inputs | min | result |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "| parser | inputs |",
            "|---|---|",
            *[f"| {name} | {count} |" for name, count in sorted(totals.items())],
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every file's GQA_FUZZ_SCALE")
    parser.add_argument("--part", default="1/1", help="K/N: run every N-th piece from the K-th (parallel runs)")
    parser.add_argument("--log", type=Path, default=None, help="append each finished piece to this JSON-lines file")
    parser.add_argument("--report", type=Path, nargs="*", default=None, help="only tabulate these logs")
    parser.add_argument("--write-results", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.report is not None:  # the table of one or several (parallel) runs' logs
        pieces = [json.loads(line) for log in args.report for line in log.read_text().splitlines() if line]
    else:
        k, n = (int(v) for v in args.part.split("/"))
        pieces = []
        for file, base in PLAN[k - 1 :: n]:
            scale = max(1, round(base * args.scale))
            rc, counts, seconds, tail = run(file, scale)
            piece = {"file": file, "scale": scale, "counts": counts, "seconds": seconds, "rc": rc}
            pieces.append(piece)
            if args.log is not None:
                with args.log.open("a") as f:
                    f.write(json.dumps(piece) + "\n")
            print(json.dumps(piece), flush=True)
            if rc != 0:
                print(tail, flush=True)
    totals: dict[str, int] = {}
    rows, failed = [], []
    for piece in pieces:
        for name, count in piece["counts"].items():
            totals[name] = totals.get(name, 0) + count
        verdict = "pass" if piece["rc"] == 0 else "FAIL"
        inputs = sum(piece["counts"].values())
        rows.append(f"| {piece['file']} | {piece['scale']} | {inputs} | {piece['seconds'] / 60:.1f} | {verdict} |")
        if piece["rc"] != 0:
            failed.append(piece["file"])
    text = _table(args.scale, totals, rows, failed)
    print(text)
    if args.write_results:
        RESULTS.write_text(text)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
