"""Gemma-4-E2B-shaped export: time, peak memory, package size, and KV-cache bytes per batch row.

    python benchmarks/gemma4_kv.py [--shape e2b|tiny] [--max-length 4096] [--keep] [--no-extra-build]

Makes a random-weight checkpoint (benchmarks/random_gemma4.py, in a child process), then exports it
in child processes, each timed with its peak RSS from wait4():

- cpu int4 (fp32 activations and KV cache on CPU), `--attention gqa`, window buffers on;
- cuda fp16, `--attention gqa`, window buffers on;
- cpu int4, `--attention gqa`, window buffers off (max_length buffers on every unshared layer: the
  "no window buffers" column, built to check the per-layer arithmetic; skip it with --no-extra-build).

Window buffers are set explicitly both ways (`--set attention.sliding_window_cache=true|false`),
whatever the recipe's default (reported). `--attention gqa` is passed because the recipe's default
(auto) picks split for this config (use_bidirectional_attention=vision with image/video ids): split
keeps max_length buffers on every unshared layer, i.e. the "no window buffers" KV.

KV bytes per batch row at max_length come from the gqa packages' graph inputs and genai_config
(`gqa_export.check.reader.load_package(pkg).kv_bytes_per_row()`), per layer, against (i) the same graph
with max_length buffers everywhere (no window buffers) and (ii) full max_length buffers on all layers
with no KV sharing (every layer its own K and V at its own kv heads x head_dim, from the HF config):
what an exporter without KV sharing or window buffers allocates.

The result overwrites benchmarks/results/gemma4_<shape>.md (or --results). The temp folder (under
$HOME) is removed at the end unless --keep; e2b needs ~9.3 GB for the checkpoint plus ~9.5 GB (cuda
fp16) or ~3 GB (cpu int4: the per-layer embedding table is quantized too) per package, and each package
is deleted once measured unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MiB = 2**20


@dataclass
class Run:
    name: str
    cmd: list[str]
    seconds: float
    peak: int  # bytes
    result: dict[str, Any]  # gqa-export --json output ({} for the checkpoint)
    package_bytes: int = 0
    window_layers: list[int] = field(default_factory=list)  # layers with window-sized KV buffers


def measured(name: str, cmd: list[str], stdout: Path | None = None) -> Run:
    """Run cmd as a child; its own wall time and peak RSS (wait4 rusage, not all children's)."""
    start = time.perf_counter()
    with open(stdout or os.devnull, "w") as out:
        child = subprocess.Popen(cmd, stdout=out)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{name} failed (wait status {status}): {shlex.join(cmd)}")
    result = json.loads(stdout.read_text()) if stdout else {}
    return Run(name, cmd, seconds, usage.ru_maxrss * 1024, result)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def layer_table(package: Path, ckpt: Path, max_length: int) -> dict[str, Any]:
    """Per layer: kind, KV source, heads x dim, and K+V bytes for ours / no window / no sharing.

    Runs in a child process (`_layers`): this process must stay small, because a child inherits its
    parent's RSS at exec in its own ru_maxrss (Linux keeps the old mm's high-water mark)."""
    from transformers import AutoConfig

    from gqa_export.check.reader import _PAST, BYTES, load_package

    pkg = load_package(package)
    text = AutoConfig.from_pretrained(ckpt).get_text_config()
    graph = pkg.graphs[0]
    past = {int(m.group(1)): info for info in graph.inputs if (m := _PAST.match(info["name"])) and m.group(2) == "key"}
    sources = {a.layer: a.kv_source for a in graph.attention}
    elem = {BYTES[info["elem_type"]] for info in past.values()}
    assert len(elem) == 1, elem
    nbytes = elem.pop()
    producers = {s for i, s in sources.items() if s is not None and s != i}
    rows = []
    for i, kind in enumerate(text.layer_types):
        per_layer = text.per_layer_config[i]
        kv, dim = per_layer.num_key_value_heads, per_layer.head_dim
        row = dict(layer=i, kind="sliding" if kind == "sliding_attention" else "full", kv=kv, dim=dim, bytes=nbytes)
        row["no_sharing"] = 2 * kv * dim * max_length * nbytes  # its own K and V, max_length slots
        if i in past:
            shape = past[i]["shape"]
            assert (shape[1], shape[3]) == (kv, dim), (i, shape, kv, dim)
            row["slots"] = pkg.window_slots(i)
            row["ours"] = 2 * kv * dim * row["slots"] * nbytes
            row["no_window"] = 2 * kv * dim * max_length * nbytes
            row["role"] = (
                f"KV producer (read by {sum(1 for s in sources.values() if s == i) - 1})"
                if i in producers
                else "own KV"
            )
        else:
            row.update(slots=0, ours=0, no_window=0, role=f"KV-shared (reads {sources.get(i)})")
        rows.append(row)
    assert sum(r["ours"] for r in rows) == pkg.kv_bytes_per_row(), "per-layer sum != kv_bytes_per_row()"
    from gqa_export.recipes import find_recipe

    window = pkg.decoder.get("sliding_window") or {}
    return {
        "kv_bytes_per_row": pkg.kv_bytes_per_row(),
        "rows": rows,
        "window_layers": window.get("layers") or [],
        "recipe_window_default": find_recipe("gemma4").attention.sliding_window_cache,
    }


def inspect_child(package: Path, ckpt: Path, max_length: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_layers", str(package), str(ckpt), str(max_length)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def layer_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 3, 5, 6, 13] -> "0-3, 5-6, 13"."""
    spans: list[list[int]] = []
    for i in sorted(layers):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def kv_markdown(title: str, rows: list[dict[str, Any]], built_no_window: int | None) -> str:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        role = r["role"].split(" (reads")[0] if r["role"].startswith("KV-shared") else r["role"]
        groups.setdefault((r["kind"], role, r["kv"], r["dim"], r["slots"]), []).append(r)
    out = [
        f"### {title}\n",
        "| layers | count | kind | KV | kv heads x head_dim | slots / layer | ours | no window buffers "
        "| full buffers, no KV sharing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (kind, role, kv, dim, slots), members in groups.items():
        if role.startswith("KV-shared"):
            reads = sorted({m["role"].split("reads ")[1].rstrip(")") for m in members})
            role = f"KV-shared (reads {', '.join(reads)}), no cache"
        out.append(
            f"| {layer_ranges([m['layer'] for m in members])} | {len(members)} | {kind} | {role} | {kv} x {dim} "
            f"| {slots or '-'} | {mib(sum(m['ours'] for m in members))} | {mib(sum(m['no_window'] for m in members))} "
            f"| {mib(sum(m['no_sharing'] for m in members))} |"
        )
    ours, no_window, no_sharing = (sum(r[k] for r in rows) for k in ("ours", "no_window", "no_sharing"))
    check = "" if built_no_window is None else f" (built package: {mib(built_no_window)})"
    out.append(
        f"| **total** | {len(rows)} | | | | | **{mib(ours)}** ({ours:,} B) | **{mib(no_window)}** ({no_window:,} B)"
        f"{check} | **{mib(no_sharing)}** ({no_sharing:,} B) |"
    )
    out.append(
        f"| ratio to ours | | | | | | 1.00x | {no_window / ours:.2f}x | {no_sharing / ours:.2f}x |\n"
        if ours
        else "| | | | | | | | | |\n"
    )
    return "\n".join(out)


def mib(n: int) -> str:
    if n == 0:
        return "0"
    if n < MiB:
        return f"{n / 1024:.1f} KiB"
    return f"{n / MiB:.2f} MiB" if n < 10 * MiB else f"{n / MiB:.1f} MiB"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("gqa-export", "onnx", "onnxruntime", "onnxruntime-gpu", "transformers"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return ", ".join(f"{name} {v}" for name, v in found.items())


def machine_line() -> str:
    mem = ""
    if Path("/proc/meminfo").is_file():
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}; Python "
        f"{sys.version.split()[0]}, {versions()}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=("e2b", "tiny"), default="e2b")
    parser.add_argument("--dtype", default="bf16", help="checkpoint dtype")
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and packages (prints the folder)")
    parser.add_argument("--no-extra-build", action="store_true", help="skip the no-window-buffers package")
    parser.add_argument("--results", type=Path, help="markdown file (default benchmarks/results/gemma4_<shape>.md)")
    args = parser.parse_args()
    results = args.results or HERE / "results" / f"gemma4_{args.shape}.md"
    # No heavy imports here (see layer_table): packages are read in child processes.
    tmp = Path(tempfile.mkdtemp(dir=Path.home(), prefix="gemma4_kv-"))
    try:
        free, need = shutil.disk_usage(tmp).free, (45 if args.keep else 25) * 2**30
        if args.shape == "e2b" and free < need:  # checkpoint 9.3 GB; packages ~9.5 (cuda fp16) / ~11 GB (cpu int4)
            print(f"warning: {free / 2**30:.0f} GiB free under {tmp}; this run needs ~{need / 2**30:.0f} GiB")
        ckpt = tmp / "ckpt"
        make = measured(
            "checkpoint",
            [sys.executable, str(HERE / "random_gemma4.py"), str(ckpt), "--shape", args.shape, "--dtype", args.dtype],
        )
        ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
        print(f"checkpoint: {ckpt_bytes / MiB:.0f} MiB in {make.seconds:.1f} s, peak RSS {make.peak / MiB:.0f} MiB")
        common = ["--attention", "gqa", "--no-smoke", "--max-length", str(args.max_length), "-q", "--json"]
        window, no_window = (["--set", f"attention.sliding_window_cache={on}"] for on in ("true", "false"))
        targets = [
            ("cpu int4", ["--ep", "cpu", "--precision", "int4", *window]),
            ("cuda fp16", ["--ep", "cuda", "--precision", "fp16", *window]),
        ]
        if not args.no_extra_build:
            targets.append(("cpu int4, no window buffers", ["--ep", "cpu", "--precision", "int4", *no_window]))
        runs: list[Run] = []
        tables: dict[str, list[dict[str, Any]]] = {}
        built_no_window = None
        for n, (name, flags) in enumerate(targets):
            out = tmp / f"pkg{n}"
            cmd = ["gqa-export", "build", str(ckpt), "-o", str(out), *flags, *common]
            run = measured(name, cmd, stdout=tmp / f"pkg{n}.json")
            run.package_bytes = folder_bytes(out)
            kv = inspect_child(out, ckpt, args.max_length)
            run.window_layers, recipe_default = kv["window_layers"], kv["recipe_window_default"]
            if "no window" in name:
                built_no_window = kv["kv_bytes_per_row"]
            else:
                tables[name] = kv["rows"]
            runs.append(run)
            print(f"{name}: {run.result['attention']} {run.package_bytes / MiB:.0f} MiB, peak RSS "
                  f"{run.peak / MiB:.0f} MiB, {run.seconds:.1f} s, KV/row {kv['kv_bytes_per_row']} B")  # fmt: skip
            if not args.keep:
                shutil.rmtree(out)
        if built_no_window is not None:  # the built package must agree with the per-layer arithmetic
            assert built_no_window == sum(r["no_window"] for r in tables["cpu int4"]), built_no_window
        report = render(args, make, ckpt_bytes, runs, tables, built_no_window, recipe_default)
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(report)
        print(report)
        print(f"written: {results}")
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def render(args: argparse.Namespace, make: Run, ckpt_bytes: int, runs: list[Run], tables: dict[str, list],
           built_no_window: int | None, recipe_default: bool) -> str:  # fmt: skip
    def display(cmd: list[str], run_dir: Path) -> str:
        text = shlex.join(cmd).replace(str(run_dir / "ckpt"), "$CKPT").replace(str(run_dir), "$TMP")
        return text.replace(sys.executable, "python").replace(str(HERE), "benchmarks")

    run_dir = Path(make.cmd[2]).parent
    lines = [
        f"# Gemma-4 ({args.shape}) export: memory, time and KV cache\n",
        f"{date.today()}. {machine_line()} Peak RSS is the whole CLI process's (wait4), imports included.\n",
        f"Checkpoint: random-weight Gemma4ForConditionalGeneration, {args.shape} text shape, {args.dtype}, text "
        f"decoder only (no vision/audio tensors): {ckpt_bytes / MiB:.0f} MiB of safetensors, written in "
        f"{make.seconds:.1f} s with peak RSS {make.peak / MiB:.0f} MiB (benchmarks/random_gemma4.py). "
        f"max_length {args.max_length}.\n",
        "## Exports\n",
        "| target | attention | window buffers | package size | peak RSS | peak / checkpoint | time |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        windows = f"layers {layer_ranges(run.window_layers)}" if run.window_layers else "off"
        lines.append(
            f"| {run.name} | {run.result['attention']} | {windows} | {run.package_bytes / MiB:.0f} MiB "
            f"| {run.peak / MiB:.0f} MiB | {run.peak / ckpt_bytes:.2f}x | {run.seconds:.1f} s |"
        )
    lines += [
        "\nThe recipe's default attention (auto) picks split for this config (use_bidirectional_attention=vision with "
        "image/video ids); split keeps max_length buffers on every unshared layer (= the no-window column below), so "
        "these exports pass `--attention gqa`. Window buffers are set explicitly (`--set "
        "attention.sliding_window_cache=true|false`); the gemma4 recipe's default at this run: "
        f"{'on' if recipe_default else 'off'}.\n",
        f"## KV cache per batch row at max_length {args.max_length}\n",
        "ours: the gqa package's past_key_values inputs, window-sized buffers (sliding_window_cache) on the unshared "
        "sliding layers that no other layer reads (ORT GenAI allocates window + slack slots: slack 16 on CPU, 0 on "
        "CUDA), max_length buffers on full layers and on KV producers, no cache for the KV-shared layers; the total is "
        "`gqa_export.check.reader.load_package(pkg).kv_bytes_per_row()`. No window buffers: the same graph with "
        "max_length slots on every unshared layer. Full buffers, no KV sharing: computed from the HF config, every "
        "layer its own K and V of max_length slots at its own kv heads x head_dim (what an exporter without KV "
        "sharing or window buffers allocates). K and V together.\n",
    ]
    dtypes = {"cuda fp16": "fp16 KV (cuda fp16 package)", "cpu int4": "fp32 KV (cpu int4 package: int4 packages "
              "keep fp32 activations and KV cache on CPU)"}  # fmt: skip
    for name, rows in tables.items():
        lines.append(kv_markdown(dtypes.get(name, name), rows, built_no_window if name == "cpu int4" else None))
    lines += ["## Commands\n", "```sh", f"python benchmarks/gemma4_kv.py --shape {args.shape} --dtype {args.dtype} "
              f"--max-length {args.max_length}{' --no-extra-build' if args.no_extra_build else ''}", "# runs:",
              display(make.cmd, run_dir)]  # fmt: skip
    lines += [display(run.cmd, run_dir) for run in runs]
    lines += ["```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["_layers"]:  # child mode: python gemma4_kv.py _layers PACKAGE CKPT MAX_LENGTH
        print(json.dumps(layer_table(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
