"""Proof that a refactor changed no exported byte: the same packages made by two trees, compared.

    python benchmarks/byte_identity.py [--base REV] [--jobs 2] [--only A,B] [--list] [--write-results]
                                       [--keep] [--self]

A refactor that claims "no exported byte changed" should be checked, not argued: this script
checks REV (default HEAD) out into a temporary `git worktree`, makes the inputs of a spread of
cases once (tiny seeded checkpoints, PEFT adapters, a recipe and a release spec, with the working
tree's own test generators in tests/, so both sides read the very same files), and runs every
case twice -- once with REV's code, once with the working tree's. A case is a sequence of
gqa-export commands (build; build then quantize; build then adapter; release), each in a fresh
`python -m gqa_export ...` subprocess (builds with `--no-smoke -q`). The spread
(benchmarks/byte_identity_spread.py, `--list` prints it) covers:
- dense: GQA, standard Attention (bias, sliding window, --max-length), split, --bidirectional-token-ids
  (auto picks split);
- weights: int8; int4 with every knob (--block-size, --quant-method search, --accuracy-level,
  --keep-float, --quant-embeddings, --report); k_quant with --mixed-precision; a tied embedding
  quantized in place; KV caches int8 and int4 (per-tensor scales, --kv-calibration);
- EPs: CUDA fp16, bf16, int4 with --cuda-graph, MoE int4 with --activations bf16; OpenVINO int4;
  QNN; TRT-RTX int4; DML fp16; WebGPU fp16 and int4 --symmetric;
- the pad id rules: the model's pad (every llama case), an unused embedding row (a QNN package),
  the eos fallback;
- I/O and recipes: --prune-lm-head, --inputs-embeds with --hidden-states, --no-lm-head, a --set
  override, a --recipe file with build defaults;
- mechanisms: MoE int4 (QMoE), DeepSeek-V3 MLA (int4, and the latent cache), hybrids (LFM2 int4,
  Qwen3.5 CUDA fp16), a Gemma-4 split int4 package;
- multimodal: full packages (Gemma-3 vision float, and int4 with --encoder-precision int8;
  Gemma-4 vision + audio int4) and a Qwen2.5-VL --text-only decoder;
- pre-quantized sources: a GPTQ import (desc_act), an FP8 import (block scales) re-quantized to
  int4, a bitsandbytes NF4 source with --dequantize;
- the other commands: `quantize` of a float package (with every default, and int8 with knobs),
  `build --draft` (a speculative pair), a multi-LoRA base with two `adapter` files (one rsLoRA),
  and a `release` of three variants (one a LoRA base shipping its adapter), both with defaults
  left to them, so a refactor that moves a default is caught.

Why a fresh subprocess with PYTHONPATH set to the tree, run from a neutral folder: the venv holds
gqa_export installed editable from the working tree, so an in-process import (or a subprocess
started in the checkout, whose folder comes first on sys.path) would silently build both sides
with the same code. Each side's `gqa_export.__file__` is printed and checked to lie in its tree.

What is compared: every file a case writes, byte for byte -- graphs, weights, genai_config.json,
tokenizer files, processor configs, .onnx_adapter files -- except three that record the tool
rather than the export, compared as normalized text instead:
- manifest.json without `tool.version`, `created`, `recipe.sha256` (a refactor may reformat a
  built-in recipe file) and `digest` (the hash of the rest): so a refactor that drops or renames
  an option in the manifest is still caught;
- release.json without `tool.version`, `created` and `digest`, with the sha256/bytes of each
  manifest.json and of README.md masked (those are compared themselves) and each variant's `bytes`
  counted without its manifest;
- a release's README.md (the model card) with the tool version masked (its size column counts
  the manifests, whose length changes with the version string's: bump the version apart).
SOURCE_DATE_EPOCH is set for both sides all the same, so their inputs differ in code alone. A file
present on one side only counts as a difference.

Prints a table (package, file, bytes, how compared, identical), each case's time per side and the
elapsed time; exits 1 naming every differing file (the first differing byte offset, or the first
differing JSON key), 2 if a command fails, 0 when all are identical. `--self` runs the working tree
twice instead, which tells nondeterminism (differs against itself) from a real change.
`--write-results` also writes benchmarks/results/byte_identity.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from byte_identity_spread import CASES, INPUTS, OUT, PLACEHOLDER, Case

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
RESULTS = REPO / "benchmarks" / "results" / "byte_identity.md"
EPOCH = "1700000000"  # 2023-11-14T22:13:20Z; any fixed value does, as long as both sides share it
MANIFEST, RELEASE, CARD = "manifest.json", "release.json", "README.md"
TOOL_VERSION = re.compile(r"gqa-export \d[\w.+-]*\w")
MASKED = "(compared apart)"


@dataclass(frozen=True)
class Row:
    """One compared file of one case."""

    package: str
    file: str
    base_bytes: int | None  # None: absent on that side
    work_bytes: int | None
    how: str  # "bytes", or "normalized" (manifest.json, release.json, a release's README.md)
    difference: str | None  # where the two first differ; None when identical

    @property
    def identical(self) -> bool:
        return self.difference is None

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


def make_inputs(root: Path, names: set[str]) -> dict[str, Path]:
    """Each needed input once (and the inputs it needs), from the working tree's tests/ generators
    (their chatter hidden)."""
    sys.path.insert(0, str(TESTS))
    made: dict[str, Path] = {}

    def need(name: str) -> Path:
        if name not in made:
            made[name] = INPUTS[name](root / name, need)
        return made[name]

    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            for name in sorted(names):
                need(name)
    except Exception:
        print(chatter.getvalue(), file=sys.stderr)
        raise
    return made


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a command: imports from `tree` only, a fixed build time, no network."""
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(tree),
        SOURCE_DATE_EPOCH=EPOCH,
        PYTHONDONTWRITEBYTECODE="1",  # leave both trees as they were
        HF_HUB_OFFLINE="1",
    )
    return env


def imported_from(tree: Path, cwd: Path) -> Path:
    """`gqa_export.__file__` as a subprocess of `tree` sees it; refuses any other tree."""
    probe = [sys.executable, "-c", "import gqa_export; print(gqa_export.__file__)"]
    done = subprocess.run(probe, env=tree_env(tree), cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"importing gqa_export from {tree} failed:\n{done.stderr}")
    path = Path(done.stdout.strip()).resolve()
    if not path.is_relative_to(tree.resolve()):
        raise SystemExit(f"gqa_export imported from {path}, not from {tree}: PYTHONPATH did not take")
    return path


def filled(step: tuple[str, ...], inputs: dict[str, Path], out: Path) -> list[str]:
    """A step's argv with `{out}` and `{INPUT}` replaced by paths."""
    paths = {**{k: str(v) for k, v in inputs.items()}, OUT: str(out)}
    return [PLACEHOLDER.sub(lambda m: paths[m.group(1)], arg) for arg in step]


def run_case(tree: Path, case: Case, inputs: dict[str, Path], out: Path, cwd: Path) -> tuple[float, str | None]:
    """A case's commands in order with `tree`'s code: (seconds, error text of the first that fails, or None)."""
    start = time.perf_counter()
    for step in case.steps:
        command = [sys.executable, "-m", "gqa_export", *filled(step, inputs, out)]
        done = subprocess.run(command, env=tree_env(tree), cwd=cwd, capture_output=True, text=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            return time.perf_counter() - start, f"$ {shlex.join(command)}\nexit {done.returncode}\n{output}"
    return time.perf_counter() - start, None


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


def normalized_manifest(document: dict[str, Any]) -> dict[str, Any]:
    """manifest.json less what names the tool rather than the export (see the module docstring)."""
    document = copy.deepcopy(document)
    for key in ("created", "digest"):
        document.pop(key, None)
    for section, key in (("tool", "version"), ("recipe", "sha256")):
        if isinstance(document.get(section), dict):
            document[section].pop(key, None)
    return document


def normalized_release(document: dict[str, Any]) -> dict[str, Any]:
    """release.json less the tool version, time and digest, with the hashes of the files compared
    apart (manifests, the card) masked and each variant's bytes counted without its manifest."""
    document = copy.deepcopy(document)
    for key in ("created", "digest"):
        document.pop(key, None)
    if isinstance(document.get("tool"), dict):
        document["tool"].pop("version", None)

    def mask(files: dict[str, Any]) -> None:
        for name in files:
            if name.rsplit("/", 1)[-1] == MANIFEST or name == CARD:
                files[name] = MASKED

    mask(document.get("files", {}))
    for variant in document.get("variants", []):
        files = variant.get("files", {})
        if isinstance(files.get(MANIFEST), dict) and isinstance(variant.get("bytes"), int):
            variant["bytes"] -= files[MANIFEST]["bytes"]
        mask(files)
    return document


def json_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The first key path where two parsed JSON documents differ, with both values; None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            here = f"{where}.{key}" if where else str(key)
            if key not in b or key not in a:
                return f"key {here} only on the {'base' if key in a else 'work'} side"
            found = json_difference(a[key], b[key], here)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = (json_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
        return next((d for d in found if d), None)
    if a == b and type(a) is type(b):
        return None
    shown = [json.dumps(v)[:80] for v in (a, b)]
    return f"key {where or '(document)'}: {shown[0]} -> {shown[1]}"


def normalized_difference(name: str, a: Path, b: Path) -> str | None:
    if name == CARD:
        texts = [TOOL_VERSION.sub("gqa-export VERSION", p.read_text()) for p in (a, b)]
        if texts[0] == texts[1]:
            return None
        lines = [[*t.splitlines(), None] for t in texts]  # None: one text ended
        line = next(i for i, (x, y) in enumerate(zip(*lines, strict=False)) if x != y)
        return f"line {line + 1} differs (tool version masked)"
    normalize = normalized_manifest if name == MANIFEST else normalized_release
    return json_difference(*(normalize(json.loads(p.read_text())) for p in (a, b)))


def compare(package: str, base: Path, work: Path) -> list[Row]:
    """Every file either side wrote, byte for byte; the three tool records normalized."""
    names = {str(p.relative_to(root)) for root in (base, work) for p in root.rglob("*") if p.is_file()}
    rows = []
    for name in sorted(names):
        a, b = base / name, work / name
        size_a = a.stat().st_size if a.is_file() else None
        size_b = b.stat().st_size if b.is_file() else None
        leaf = Path(name).name
        how = "normalized" if leaf in (MANIFEST, RELEASE) or (leaf == CARD and (base / RELEASE).is_file()) else "bytes"
        if size_a is None or size_b is None:
            difference: str | None = "present on one side only"
        elif how == "normalized":
            difference = normalized_difference(leaf, a, b)
        else:
            offset = first_difference(a, b)
            difference = None if offset is None else f"first difference at byte {offset:,}"
        rows.append(Row(package, name, size_a, size_b, how, difference))
    return rows


def table(rows: list[Row], markdown: bool) -> str:
    header = ("package", "file", "bytes", "compared", "identical")
    cells = [(r.package, r.file, r.bytes_text, r.how, "yes" if r.identical else "NO") for r in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|---|---|--:|---|---|"]
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
        help="run the working tree twice instead (nondeterminism check); --base is ignored",
    )
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    parser.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the cases and their commands, and exit")
    parser.add_argument("--keep", action="store_true", help="keep the inputs and packages; print where")
    parser.add_argument("--write-results", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    args = parser.parse_args()

    if args.list:
        for case in CASES:
            print(f"{case.name}: {case.text}")
        return 0
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
    base_label = "working tree (1st run)" if args.self_check else f"{args.base} = {base_commit[:12]}"
    work_label = "working tree (2nd run)" if args.self_check else f"working tree ({len(dirty)} changed paths)"

    root = Path(tempfile.mkdtemp(prefix="byte-identity-"))
    worktree = root / "base-tree"
    rows: list[Row] = []
    failures: list[str] = []
    failed: set[str] = set()  # cases whose commands failed on either side
    seconds: dict[tuple[str, str], float] = {}
    try:
        if args.self_check:
            base_tree = REPO
        else:
            git("worktree", "add", "--detach", "--quiet", str(worktree), base_commit)
            base_tree = worktree
        neutral = root / "cwd"  # commands start here, so that only PYTHONPATH decides what gqa_export is
        neutral.mkdir()
        print(f"base: {base_label}\n  gqa_export from {imported_from(base_tree, neutral)}")
        print(f"work: {work_label}\n  gqa_export from {imported_from(REPO, neutral)}")

        t = time.perf_counter()
        inputs = make_inputs(root / "inputs", set().union(*(c.inputs for c in cases)))
        print(f"inputs: {', '.join(inputs)} ({time.perf_counter() - t:.1f} s, from {TESTS})", flush=True)

        jobs = [(side, tree, case) for case in cases for side, tree in (("base", base_tree), ("work", REPO))]

        def run(job: tuple[str, Path, Case]) -> tuple[str, Case, float, str | None]:
            side, tree, case = job
            return (side, case, *run_case(tree, case, inputs, root / side / case.name, neutral))

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for side, case, took, error in pool.map(run, jobs):
                seconds[(side, case.name)] = took
                print(f"  ran {side} {case.name:<30} {took:6.1f} s{'  FAILED' if error else ''}", flush=True)
                if error:
                    failures.append(f"{side} {case.name} failed:\n{error}")
                    failed.add(case.name)
        for case in cases:
            if case.name not in failed:
                rows.extend(compare(case.name, root / "base" / case.name, root / "work" / case.name))
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
        print(f"DIFFERS: {r.package}/{r.file} ({r.bytes_text} bytes; {r.difference})")
    total = sum(r.work_bytes or 0 for r in rows)
    verdict = (
        f"{len(differing)} of {len(rows)} files differ"
        if differing
        else f"all {len(rows)} files identical ({total:,} bytes in {len(cases) - len(failed)} cases)"
    )
    if failures:
        verdict = f"{len(failures)} command sequence(s) failed ({len(failed)} cases not compared); {verdict}"
    print(f"{verdict}; base {base_label} vs {work_label}; elapsed {elapsed:.1f} s ({args.jobs} job(s))")

    if args.write_results:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)

        def took(case: Case) -> str:
            return " | ".join(f"{seconds.get((side, case.name), 0):.1f}" for side in ("base", "work"))

        timing = "".join(f"| {c.name} | `{c.text}` | {took(c)} |\n" for c in cases)
        RESULTS.write_text(
            "# Byte identity of exported packages\n\n"
            f"`python benchmarks/byte_identity.py {shlex.join(sys.argv[1:])}` on {stamp}, "
            f"{platform.machine()} {os.cpu_count()} CPUs (shared), Python {platform.python_version()}, "
            f"SOURCE_DATE_EPOCH={EPOCH}.\n\n"
            f"- base: {base_label}\n- work: {work_label}\n- elapsed: {elapsed:.1f} s with --jobs {args.jobs}\n"
            f"- result: {verdict}\n\n"
            "Cases: gqa-export commands (`{out}` is the case's folder, `{NAME}` an input of "
            "benchmarks/byte_identity_spread.py) and seconds per side:\n\n"
            "| case | commands | base s | work s |\n|---|---|--:|--:|\n" + timing + "\n"
            "Every file written is compared byte for byte, except manifest.json, release.json and a "
            "release's README.md, compared normalized (see the script's docstring).\n\n"
            + table(rows, markdown=True)
            + "\n"
        )
        print(f"wrote {RESULTS.relative_to(REPO)}")
    if failures:
        return 2
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
