"""The long fuzz run by hand (issue #36): every fuzzed parser of tests/fuzz with many more inputs.

    python benchmarks/fuzz_long.py [--scale 1.0] [--write-results]

The suite runs tests/fuzz with a few dozen derandomized inputs per test; this runs each file with
`GQA_FUZZ_SCALE` times as many random ones (the fast parsers get the larger factors), sums the
inputs each parser saw (tests/fuzz/conftest.py writes them) and, with --write-results, writes the
table to benchmarks/results/fuzz_long.md. `--scale 0.01` is a quick check of the script itself.
A failure is a traceback or a multi-line error: fix it in gqa_export/ with a regression test.
"""

from __future__ import annotations

import argparse
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
    (YAML, 50),  # 168
    (GGUF, 75),  # 80
    ("tests/fuzz/test_fuzz_config.py", 15),  # 33 (3 builds)
    ("tests/fuzz/test_fuzz_package_files.py", 15),  # 53
    (SAFETENSORS, 70),
    (YAML, 50),
    (GGUF, 75),
    (SAFETENSORS, 70),
    (YAML, 50),
    (SAFETENSORS, 70),
    (SAFETENSORS, 70),
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
    parser.add_argument("--write-results", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    totals: dict[str, int] = {}
    rows, failed = [], []
    for file, base in PLAN:
        scale = max(1, round(base * args.scale))
        rc, counts, seconds, tail = run(file, scale)
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
        verdict = "pass" if rc == 0 else "FAIL"
        rows.append(f"| {file} | {scale} | {sum(counts.values())} | {seconds / 60:.1f} | {verdict} |")
        print(rows[-1], flush=True)
        if rc != 0:
            failed.append(file)
            print(tail, flush=True)
        text = _table(args.scale, totals, rows, failed)
        if args.write_results:  # after every piece: an interrupted run keeps what it counted
            RESULTS.write_text(text)
    print(text)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
