"""Proof that a refactor changed no exported byte: the same packages built by two trees, compared.

    python benchmarks/byte_identity.py [--base REV] [--jobs 1] [--write-results] [--keep] [--self]

A refactor that claims "no exported byte changed" should be checked, not argued: this script
checks REV (default HEAD) out into a temporary `git worktree`, makes a spread of tiny random
checkpoints once (with the working tree's own test generators in tests/, so both sides read the
very same safetensors), and builds every package twice -- once with REV's code, once with the
working tree's -- each in a fresh `python -m gqa_export build ... --no-smoke -q` subprocess.

Why a fresh subprocess with PYTHONPATH set to the tree, run from a neutral folder: the venv holds
gqa_export installed editable from the working tree, so an in-process import (or a subprocess
started in the checkout, whose folder comes first on sys.path) would silently build both sides
with the same code. Each side's `gqa_export.__file__` is printed and checked to lie in its tree.

Why SOURCE_DATE_EPOCH: manifest.json records a creation time; fixing it keeps the build inputs
identical apart from the code. manifest.json itself is not compared (it names the tool version
and hashes the recipe file, which a refactor may legitimately touch); what is compared byte for
byte is what onnxruntime-genai loads: every .onnx graph, every .data weight file and
genai_config.json. A file present on one side only counts as a difference.

The spread covers the stages a refactor is likely to disturb: a dense fp32 GQA graph, a sliding
window on the standard-Attention (bias) path, MoE experts in int4 (CPU and CUDA), a Gemma-4
split (prefill/decode) int4 package, int8 weights, a CUDA fp16 package (CUDA packages build on
CPU), an int8 KV cache (calibrated scales), a tied embedding quantized in place
(GatherBlockQuantized) and a second-wave dense family with k_quant and mixed precision.

Prints a table (package, file, bytes, identical) and the elapsed time; exits 1 naming every
differing file (with the first differing byte offset), 2 if a build fails, 0 when all are
identical. `--self` builds the working tree twice instead, which tells nondeterminism (differs
against itself) from a real change. `--write-results` also writes benchmarks/results/byte_identity.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
RESULTS = REPO / "benchmarks" / "results" / "byte_identity.md"
EPOCH = "1700000000"  # 2023-11-14T22:13:20Z; any fixed value does, as long as both sides share it
COMPARED_SUFFIXES = (".onnx", ".data")
COMPARED_NAMES = ("genai_config.json",)


@dataclass(frozen=True)
class Case:
    """One package of the spread: a checkpoint name (see `CHECKPOINTS`) and its build flags."""

    name: str
    checkpoint: str
    flags: tuple[str, ...]


def _llama(out: Path) -> Path:
    from tiny_models import save_model
    from variants import LLAMA_VARIANTS

    return save_model(out, "llama", **LLAMA_VARIANTS["gqa"])


def _family(variant: str) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        from tiny_models import save_model
        from variants import FAMILY_VARIANTS

        model_type, overrides = FAMILY_VARIANTS[variant]
        return save_model(out, model_type, **overrides)

    return make


def _moe(model_type: str) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        from moe_models import save_moe

        return save_moe(out, model_type)

    return make


def _dense(model_type: str) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        from dense_models import save_dense

        return save_dense(out, model_type)

    return make


def _gemma4(variant: str) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        from gemma4_models import save_gemma4
        from variants import GEMMA4_VARIANTS

        form, overrides = GEMMA4_VARIANTS[variant]
        return save_gemma4(out, form, **overrides)

    return make


# checkpoint name -> maker (the test suite's own generators, seeded: the same bytes every time)
CHECKPOINTS: dict[str, Callable[[Path], Path]] = {
    "llama": _llama,
    "mistral_window": _family("mistral_window"),
    "qwen3_tied": _family("qwen3_qk_norm"),  # tied embeddings, qk-norm
    "qwen3_moe": _moe("qwen3_moe"),
    "mixtral": _moe("mixtral"),
    "gemma4_causal": _gemma4("gemma4_causal"),
    "phi": _dense("phi"),
}

CASES: tuple[Case, ...] = (
    Case("llama-fp32-gqa", "llama", ("--attention", "gqa")),
    Case("mistral-window-bias", "mistral_window", ("--attention", "bias")),
    Case("qwen3moe-int4", "qwen3_moe", ("--precision", "int4")),
    Case("gemma4-split-int4", "gemma4_causal", ("--attention", "split", "--precision", "int4")),
    Case("llama-int8", "llama", ("--precision", "int8")),
    Case("llama-cuda-fp16", "llama", ("--ep", "cuda", "--precision", "fp16")),
    Case("llama-kv-int8", "llama", ("--attention", "gqa", "--kv-cache", "int8")),
    Case("mixtral-cuda-int4", "mixtral", ("--ep", "cuda", "--precision", "int4")),
    Case("qwen3-tied-int4", "qwen3_tied", ("--precision", "int4")),
    Case("phi-int4-kquant-mixed", "phi", ("--precision", "int4", "--quant-method", "k_quant",
                                          "--mixed-precision", "last_matmul:int8")),
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One compared file of one package."""

    package: str
    file: str
    base_bytes: int | None  # None: absent on that side
    work_bytes: int | None
    first_diff: int | None  # byte offset of the first difference; None when identical

    @property
    def identical(self) -> bool:
        return self.first_diff is None and self.base_bytes is not None and self.work_bytes is not None

    @property
    def bytes_text(self) -> str:
        if self.base_bytes == self.work_bytes:
            return f"{self.base_bytes:,}"
        show = ["missing" if b is None else f"{b:,}" for b in (self.base_bytes, self.work_bytes)]
        return f"{show[0]} -> {show[1]}"


def git(*args: str) -> str:
    """Read-only git queries and the worktree add/remove of our own temporary checkout."""
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def make_checkpoints(root: Path, names: set[str]) -> dict[str, Path]:
    """Each needed checkpoint once, from the working tree's tests/ generators (their chatter hidden)."""
    sys.path.insert(0, str(TESTS))
    made = {}
    for name in sorted(names):
        chatter = io.StringIO()
        try:
            with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
                made[name] = CHECKPOINTS[name](root / name)
        except Exception:
            print(chatter.getvalue(), file=sys.stderr)
            raise
    return made


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a build: imports from `tree` only, a fixed build time, no network."""
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(tree),
        SOURCE_DATE_EPOCH=EPOCH,
        PYTHONDONTWRITEBYTECODE="1",  # leave both trees as they were
        HF_HUB_OFFLINE="1",
    )
    return env


def imported_from(tree: Path, cwd: Path) -> Path:
    """`gqa_export.__file__` as a build subprocess of `tree` sees it; refuses any other tree."""
    probe = [sys.executable, "-c", "import gqa_export; print(gqa_export.__file__)"]
    done = subprocess.run(probe, env=tree_env(tree), cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"importing gqa_export from {tree} failed:\n{done.stderr}")
    path = Path(done.stdout.strip()).resolve()
    if not path.is_relative_to(tree.resolve()):
        raise SystemExit(f"gqa_export imported from {path}, not from {tree}: PYTHONPATH did not take")
    return path


def build(tree: Path, checkpoint: Path, out: Path, flags: tuple[str, ...], cwd: Path) -> tuple[float, str | None]:
    """One `python -m gqa_export build` with `tree`'s code: (seconds, error text or None)."""
    command = [sys.executable, "-m", "gqa_export", "build", str(checkpoint), "-o", str(out), "--no-smoke", "-q"]
    start = time.perf_counter()
    done = subprocess.run([*command, *flags], env=tree_env(tree), cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        return seconds, f"$ {shlex.join([*command, *flags])}\n{(done.stdout + done.stderr)[-3000:]}"
    return seconds, None


def compared_files(package: Path) -> set[str]:
    """What onnxruntime-genai loads: graphs, external weights and the genai config."""
    return {
        str(p.relative_to(package))
        for p in package.rglob("*")
        if p.is_file() and (p.name.endswith(COMPARED_SUFFIXES) or p.name in COMPARED_NAMES)
    }


def first_difference(a: Path, b: Path, chunk: int = 1 << 20) -> int | None:
    """Offset of the first differing byte (a shorter file differs where it ends); None if equal."""
    offset = 0
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                n = min(len(x), len(y))
                return offset + next((i for i in range(n) if x[i] != y[i]), n)
            if not x:
                return None
            offset += len(x)


def compare(package: str, base: Path, work: Path) -> list[Row]:
    rows = []
    for name in sorted(compared_files(base) | compared_files(work)):
        a, b = base / name, work / name
        size_a = a.stat().st_size if a.is_file() else None
        size_b = b.stat().st_size if b.is_file() else None
        diff = first_difference(a, b) if size_a is not None and size_b is not None else 0
        rows.append(Row(package, name, size_a, size_b, diff))
    return rows


def table(rows: list[Row], markdown: bool) -> str:
    header = ("package", "file", "bytes", "identical")
    cells = [(r.package, r.file, r.bytes_text, "yes" if r.identical else "NO") for r in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|---|---|--:|---|"]
        return "\n".join([*lines, *("| " + " | ".join(c) + " |" for c in cells)])
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'>' if i == 2 else '<'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*c) for c in cells)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="git revision whose code is the reference (default HEAD)")
    parser.add_argument(
        "--self",
        dest="self_check",
        action="store_true",
        help="build the working tree twice instead (nondeterminism check); --base is ignored",
    )
    parser.add_argument("--jobs", type=int, default=1, help="builds run at once (default 1)")
    parser.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and packages; print where")
    parser.add_argument("--write-results", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    args = parser.parse_args()

    start = time.perf_counter()
    cases = CASES
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {c.name for c in CASES})
        if unknown:
            parser.error(f"unknown case {unknown[0]}; choose from {', '.join(c.name for c in CASES)}")
        cases = tuple(c for c in CASES if c.name in wanted)
    base_commit = git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    dirty = git("status", "--porcelain", "--untracked-files=normal").splitlines()
    base_label = "working tree (1st build)" if args.self_check else f"{args.base} = {base_commit[:12]}"
    work_label = "working tree (2nd build)" if args.self_check else f"working tree ({len(dirty)} changed paths)"

    root = Path(tempfile.mkdtemp(prefix="byte-identity-"))
    worktree = root / "base-tree"
    rows: list[Row] = []
    failures: list[str] = []
    try:
        if args.self_check:
            base_tree = REPO
        else:
            git("worktree", "add", "--detach", "--quiet", str(worktree), base_commit)
            base_tree = worktree
        neutral = root / "cwd"  # builds start here, so that only PYTHONPATH decides what gqa_export is
        neutral.mkdir()
        print(f"base: {base_label}\n  gqa_export from {imported_from(base_tree, neutral)}")
        print(f"work: {work_label}\n  gqa_export from {imported_from(REPO, neutral)}")

        t = time.perf_counter()
        checkpoints = make_checkpoints(root / "checkpoints", {c.checkpoint for c in cases})
        print(f"checkpoints: {', '.join(checkpoints)} ({time.perf_counter() - t:.1f} s, from {TESTS})")

        jobs = [(side, tree, case) for case in cases for side, tree in (("base", base_tree), ("work", REPO))]

        def run(job: tuple[str, Path, Case]) -> tuple[str, Case, float, str | None]:
            side, tree, case = job
            out = root / side / case.name
            return (side, case, *build(tree, checkpoints[case.checkpoint], out, case.flags, neutral))

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for side, case, seconds, error in pool.map(run, jobs):
                print(f"  built {side} {case.name:<22} {shlex.join(case.flags):<55} {seconds:5.1f} s", flush=True)
                if error:
                    failures.append(f"{side} {case.name} failed:\n{error}")
        for case in cases:
            base_out, work_out = root / "base" / case.name, root / "work" / case.name
            if base_out.is_dir() and work_out.is_dir():
                rows.extend(compare(case.name, base_out, work_out))
    finally:
        if not args.self_check and worktree.exists():
            git("worktree", "remove", "--force", str(worktree))
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    elapsed = time.perf_counter() - start
    differing = [r for r in rows if not r.identical]
    print()
    print(table(rows, markdown=False))
    print()
    for failure in failures:
        print(failure, file=sys.stderr)
    for r in differing:
        one_side = None in (r.base_bytes, r.work_bytes)
        where = "present on one side only" if one_side else f"first difference at byte {r.first_diff:,}"
        print(f"DIFFERS: {r.package}/{r.file} ({r.bytes_text} bytes; {where})")
    total = sum(r.work_bytes or 0 for r in rows)
    verdict = (
        f"{len(failures)} build(s) failed"
        if failures
        else f"{len(differing)} of {len(rows)} files differ"
        if differing
        else f"all {len(rows)} files identical ({total:,} bytes in {len(cases)} packages)"
    )
    print(f"{verdict}; base {base_label} vs {work_label}; elapsed {elapsed:.1f} s")

    if args.write_results:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "# Byte identity of exported packages\n\n"
            f"`python benchmarks/byte_identity.py {shlex.join(sys.argv[1:])}` on {stamp}, "
            f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"SOURCE_DATE_EPOCH={EPOCH}, `--no-smoke -q`.\n\n"
            f"- base: {base_label}\n- work: {work_label}\n- elapsed: {elapsed:.1f} s\n- result: {verdict}\n\n"
            "Cases (flags after `build CHECKPOINT -o OUT`):\n\n"
            + "".join(f"- {c.name}: `{c.checkpoint}` `{shlex.join(c.flags)}`\n" for c in cases)
            + "\n"
            + table(rows, markdown=True)
            + "\n"
        )
        print(f"wrote {RESULTS.relative_to(REPO)}")
    if failures:
        return 2
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
