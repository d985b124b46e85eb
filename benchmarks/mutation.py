"""Source-level mutation check: one-line bugs planted in a copy of gqa_export/, each must fail its tests.

    python benchmarks/mutation.py [--only ID,ID] [--area AREA] [--list] [--baseline] [--timeout 600]
                                  [--write-results] [--keep]

A test that cannot fail is a defect (HELPERS.md), and the only proof that one can is a planted bug
it catches. tests/mutation/source_mutants.py lists one-line source mutants (a careless refactor: a
dropped offset, a flipped sign, a missing square root, a guard removed), each with the exact line it
replaces and the few test node ids that claim that code. For every mutant this script copies
gqa_export/ and recipes/ into a fresh temporary folder, replaces the line there (never in the
working tree), and runs only that mutant's tests with `-x` in a subprocess whose working directory
is the copy and whose PYTHONPATH points at it, so `import gqa_export` is the mutated package (the
script checks that before the first run). A mutant is

- caught: pytest exits non-zero (a test failed, or the mutant broke the import or a timeout hit);
- survived: every selected test passed, which is a missing test (write it, then rerun);
- equivalent: listed with the reason the change cannot alter behaviour; not run.

`--baseline` first runs the union of every selected mutant's tests on the unmutated copy: a test
that fails there would make every mutant look caught. `--write-results` writes the table to
benchmarks/results/mutation.md. Run by hand (not in CI): ~45 mutants take 15-30 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "mutation"))

from source_mutants import MUTANTS, Mutant, apply  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "mutation.md"


def copy_tree(dest: Path) -> Path:
    """gqa_export/ and recipes/ (the package finds its recipes next to itself) into `dest`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "gqa_export", dest / "gqa_export", ignore=ignore)
    shutil.copytree(ROOT / "recipes", dest / "recipes", ignore=ignore)
    return dest


def environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_import(tree: Path) -> None:
    """The subprocess must import the copy, not the working tree or the venv's editable install."""
    out = subprocess.run(
        [sys.executable, "-c", "import gqa_export; print(gqa_export.__file__)"],
        cwd=tree, env=environment(tree), capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not out.startswith(str(tree)):
        raise SystemExit(f"the mutated copy is not what the tests import: {out}")


def run_tests(tree: Path, tests: list[str], timeout: float) -> tuple[int, str, float]:
    """(pytest's exit code, the first failing node id or the last output line, seconds)."""
    command = [
        sys.executable, "-m", "pytest", *[str(ROOT / t) for t in tests], "-x", "-q", "-p", "no:cacheprovider",
        "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "-o", "addopts=", "--no-header", "-rf",
    ]  # fmt: skip
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=tree, env=environment(tree), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"timeout after {timeout:.0f} s", time.monotonic() - start
    lines = done.stdout.splitlines()
    failed = next((line.removeprefix("FAILED ") for line in lines if line.startswith(("FAILED ", "ERROR "))), "")
    if not failed and lines:
        failed = lines[-1]
    if "tests/" in failed:
        failed = failed[failed.index("tests/") :]
    return done.returncode, failed[:160], time.monotonic() - start


def run_mutant(mutant: Mutant, timeout: float, keep: bool) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant.id}-"))
    try:
        tree = copy_tree(folder)
        apply(mutant, tree)
        rc, detail, seconds = run_tests(tree, mutant.tests, timeout)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    result = "survived" if rc == 0 else "caught"
    if rc == -1:
        result = "caught (timeout)"
    elif rc not in (0, 1):
        result = f"caught (pytest exit {rc})"
    return {"mutant": mutant, "result": result, "detail": detail if rc else "", "seconds": seconds}


def baseline(mutants: list[Mutant], timeout: float) -> None:
    tests = sorted({t for m in mutants for t in m.tests})
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as folder:
        tree = copy_tree(Path(folder))
        check_import(tree)
        rc, detail, seconds = run_tests(tree, tests, timeout * 4)
    print(f"baseline: {len(tests)} test ids, exit {rc} in {seconds:.0f} s {detail}", flush=True)
    if rc != 0:
        raise SystemExit("the unmutated tree fails the selected tests; fix that first")


def table(rows: list[dict], equivalents: list[Mutant], total_seconds: float) -> str:
    caught = sum(r["result"].startswith("caught") for r in rows)
    survived = [r for r in rows if r["result"] == "survived"]
    lines = [
        "# Source mutation check (issue #36)",
        "",
        "`python benchmarks/mutation.py --baseline --write-results` (tests/mutation/source_mutants.py lists",
        "the mutants; each runs its own tests with `-x` on a mutated copy of gqa_export/).",
        "",
        f"**{len(rows) + len(equivalents)} mutants: {caught} caught, {len(survived)} survived, "
        f"{len(equivalents)} equivalent** ({total_seconds / 60:.1f} min on {os.cpu_count()} cores).",
        "",
        "| id | area | file | mutant | result | s | first failure |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["mutant"]
        change = f"`{m.original.strip()}` → `{m.replacement.strip()}`".replace("|", "\\|")
        detail = r["detail"].replace("|", "\\|")
        lines.append(f"| {m.id} | {m.area} | {m.file} | {change} | {r['result']} | {r['seconds']:.0f} | {detail} |")
    if equivalents:
        lines += ["", "## Equivalent mutants (not run)", "", "| id | file | mutant | why it cannot change behaviour |"]
        lines.append("|---|---|---|---|")
        for m in equivalents:
            change = f"`{m.original.strip()}` → `{m.replacement.strip()}`".replace("|", "\\|")
            lines.append(f"| {m.id} | {m.file} | {change} | {m.equivalent} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated mutant ids")
    parser.add_argument("--area", default="", help="only the mutants of this area")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--baseline", action="store_true", help="first run every selected test unmutated")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--write-results", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies (printed)")
    args = parser.parse_args()
    only = {s for s in args.only.split(",") if s}
    chosen = [m for m in MUTANTS if (not only or m.id in only) and (not args.area or m.area == args.area)]
    if only - {m.id for m in chosen}:
        raise SystemExit(f"unknown mutant ids: {sorted(only - {m.id for m in chosen})}")
    runnable = [m for m in chosen if m.equivalent is None]
    equivalents = [m for m in chosen if m.equivalent is not None]
    if args.list:
        for m in chosen:
            print(f"{m.id:28} {m.area:10} {m.file}: {m.replacement.strip()}  [{', '.join(m.tests)}]")
        return
    start = time.monotonic()
    if args.baseline:
        baseline(runnable, args.timeout)
    else:
        with tempfile.TemporaryDirectory(prefix="mutant-check-") as folder:
            check_import(copy_tree(Path(folder)))
    rows = []
    for i, mutant in enumerate(runnable, 1):
        row = run_mutant(mutant, args.timeout, args.keep)
        rows.append(row)
        print(
            f"[{i}/{len(runnable)}] {mutant.id}: {row['result']} ({row['seconds']:.0f} s) {row['detail']}", flush=True
        )
    text = table(rows, equivalents, time.monotonic() - start)
    survived = sum(r["result"] == "survived" for r in rows)
    print(text.splitlines()[5])
    if args.write_results:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    raise SystemExit(1 if survived else 0)


if __name__ == "__main__":
    main()
