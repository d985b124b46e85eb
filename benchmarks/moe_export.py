"""gpt-oss-shaped MoE (MXFP4 experts) to int4 CPU: gqa-export vs the official builder, and MoE vs dense decode speed.

    python benchmarks/moe_export.py [--shape gpt-oss-2g|tiny] [--rounds 3] [--threads 1,2] [--keep]
                                    [--builder-pythonpath DIR] [--results PATH]

1. Makes two random-weight checkpoints in a child process (benchmarks/random_moe.py): the gpt-oss-
   shaped MoE with MXFP4 experts as the releases ship them (gpt-oss-2g: 32 experts, top-4, ~2.14 GB),
   and a dense Llama with the same hidden size, attention and layers and one MLP of width top_k * I,
   i.e. the same parameters per token as the MoE's active path.
2. Exports, each in its own child process, timed, with its peak RSS from wait4() (the child's own,
   imports included):
   - the MoE with gqa-export: `gqa-export build CKPT -o OUT --ep cpu --precision int4 --no-smoke`;
   - the MoE with the official builder: `python -m onnxruntime_genai.models.builder -i CKPT -o OUT
     -p int4 -e cpu -c CACHE`, reported as it ends (time and peak RSS, or its error). transformers
     5.24 refuses to load an MXFP4 checkpoint without `accelerate` ("Using mxfp4 requires
     Accelerate"), which the builder hits in from_pretrained. With `--builder-pythonpath DIR` (e.g.
     after `pip install --target DIR accelerate`) the builder runs a second time with DIR on its
     PYTHONPATH (that process only), so both outcomes are in the table;
   - the dense checkpoint with gqa-export, same flags.
3. Decode speed on CPU through onnxruntime-genai: prompt 128 + 128 new tokens (greedy, min_length =
   max_length so no early stop), for our MoE package, the dense package and the builder's MoE package
   when it built, at each --threads value (intra-op threads). Each measurement is a fresh process (load,
   a short warm-up generation, then the timed one); rounds are interleaved (round r runs every package
   at every thread count, package order rotated each round) and the table gives the median of --rounds.
   decode tok/s = new tokens / time of the generate_next_token loop; prefill = the append_tokens call.
   The warm-up is prompt + 8 tokens: the builder's packages keep window-sized KV buffers on sliding
   layers and fail on a max_length below the window ("KV cache capacity (24) must be at least
   local_window_size (32)" from GroupQueryAttention). A package that fails to decode is reported as such.

Results overwrite benchmarks/results/moe_export.md (or --results). Everything is written under a temp
folder in $HOME, removed at the end unless --keep. gpt-oss-2g needs ~8 GB of disk (checkpoints 2.1 +
1.2 GB, packages ~1.9 + 1.9 + 0.4 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
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
PROMPT, NEW = 128, 128

DECODE = r"""
import json, sys, time
import onnxruntime_genai as og
path, threads, prompt_len, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = og.Config(path)
config.clear_providers()
config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads,
                                                                     "inter_op_num_threads": 1}}}}))
model = og.Model(config)
prompt = [(5 * i + 1) % 300 + 6 for i in range(prompt_len)]  # ids 6..305: inside the tiny tokenizer, no specials

def generate(tokens, total):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    gen = og.Generator(model, params)
    t0 = time.perf_counter()
    gen.append_tokens(tokens)
    t1 = time.perf_counter()
    n = 0
    while not gen.is_done():
        gen.generate_next_token()
        n += 1
    return t1 - t0, n, time.perf_counter() - t1

generate(prompt, prompt_len + 8)  # warm-up (the builder's window-sized KV buffers need max_length >= the window)
prefill, n, seconds = generate(prompt, prompt_len + new)
print(json.dumps({"prefill_s": prefill, "tokens": n, "decode_s": seconds, "tok_s": n / seconds}))
"""


@dataclass
class Run:
    name: str
    cmd: list[str]
    seconds: float
    peak: int  # bytes
    error: str | None = None
    package: Path | None = None
    package_bytes: int = 0
    ops: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def last_error(log: Path) -> str:
    """The exception line of a traceback in log (else its last non-empty line)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\b", line)]
    return (errors or lines or ["(no output)"])[-1][:400]


def measured(name: str, cmd: list[str], log: Path, stdout: Path | None = None, env: dict | None = None) -> Run:
    """Run cmd as a child: its wall time and its own peak RSS (wait4 rusage); failures are recorded, not raised."""
    start = time.perf_counter()
    with open(log, "w") as err, open(stdout or os.devnull, "w") as out:
        child = subprocess.Popen(cmd, stdout=err if stdout is None else out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
    run = Run(name, cmd, time.perf_counter() - start, usage.ru_maxrss * 1024)
    if status != 0:
        code = os.waitstatus_to_exitcode(status)
        run.error = f"exit {code}: {last_error(log)}"
    return run


def model_bytes(path: Path) -> int:
    """Bytes of the package's graph and weights (*.onnx, *.data), as quant_vs_builder.py counts them."""
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file() and p.suffix in (".onnx", ".data"))


def graph_ops(package: Path) -> dict[str, Any]:
    """Child mode: op counts of model.onnx and the expert ops' quantization attributes."""
    import onnx

    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    ops: dict[str, int] = {}
    experts = []
    for node in graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
        if node.op_type in ("MoE", "QMoE"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            experts.append({k: attrs.get(k) for k in ("expert_weight_bits", "block_size", "k", "swiglu_fusion")})
    return {"ops": ops, "experts": experts}


def inspect_child(package: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_ops", str(package)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def decode_child(package: Path, threads: int) -> dict[str, Any]:
    """{"tok_s", "prefill_s", ...}, or {"error": last line of stderr} when the package fails to run."""
    cmd = [sys.executable, "-c", DECODE, str(package), str(threads), str(PROMPT), str(NEW)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()] or ["(no output)"]
        return {"error": lines[-1][:400]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def experts_label(ops: dict[str, Any]) -> str:
    """e.g. "QMoE 4-bit, block 32 x 8; MatMulNBits x 17"."""
    if not ops:
        return "-"
    labels = []
    for e in ops["experts"]:
        bits, block = e.get("expert_weight_bits"), e.get("block_size")
        label = "QMoE" if bits else "MoE (float)"
        label += f" {bits}-bit" if bits else ""
        label += f", block {block}" if block else (", per-row scales" if bits else "")
        labels.append(label)
    kinds = ", ".join(f"{k} x {labels.count(k)}" for k in dict.fromkeys(labels)) or "no MoE op"
    return f"{kinds}; MatMulNBits x {ops['ops'].get('MatMulNBits', 0)}"


def median_cell(values: list[float], fmt: str = "{:.1f}") -> str:
    if not values:
        return "-"
    spread = ", ".join(fmt.format(v) for v in values)
    return f"{fmt.format(statistics.median(values))} ({spread})" if len(values) > 1 else fmt.format(values[0])


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("gqa-export", "onnx", "onnxruntime", "onnxruntime-gpu", "onnxruntime-genai", "onnxruntime-genai-cuda",
                 "transformers", "torch", "accelerate"):  # fmt: skip
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


def accelerate_version(pythonpath: Path) -> str:
    code = "import accelerate; print(accelerate.__version__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return done.stdout.strip() if done.returncode == 0 else "not importable"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=("gpt-oss-2g", "tiny"), default="gpt-oss-2g")
    parser.add_argument("--rounds", type=int, default=3, help="decode measurements per package and thread count")
    parser.add_argument("--threads", default="1,2", help="comma-separated intra-op thread counts for decode")
    parser.add_argument("--builder-pythonpath", type=Path, metavar="DIR",
                        help="also run the builder with DIR on its PYTHONPATH (e.g. a `pip install --target DIR "
                             "accelerate` folder)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and packages (prints the folder)")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "moe_export.md")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    # No heavy imports in this process: a child inherits its parent's RSS at exec in its own ru_maxrss.
    tmp = Path(tempfile.mkdtemp(dir=Path.home(), prefix="moe_export-"))
    try:
        if args.shape != "tiny" and shutil.disk_usage(tmp).free < 10 * 2**30:
            print(f"warning: {shutil.disk_usage(tmp).free / 2**30:.0f} GiB free under {tmp}; this run needs ~8 GiB")
        moe, dense = tmp / "moe", tmp / "dense"
        make = measured("checkpoints", [sys.executable, str(HERE / "random_moe.py"), str(moe), "--shape", args.shape,
                                        "--dense", str(dense)], tmp / "checkpoints.log")  # fmt: skip
        if make.error:
            raise SystemExit(f"checkpoint generation failed: {make.error} (log: {tmp / 'checkpoints.log'})")
        shape = json.loads((moe / "moe_shape.json").read_text())
        config = json.loads((moe / "config.json").read_text())
        sizes = {name: sum(p.stat().st_size for p in path.glob("*.safetensors")) for name, path in
                 (("moe", moe), ("dense", dense))}  # fmt: skip
        print(f"checkpoints: MoE {sizes['moe'] / MiB:.0f} MiB, dense {sizes['dense'] / MiB:.0f} MiB in "
              f"{make.seconds:.1f} s, peak RSS {make.peak / MiB:.0f} MiB", flush=True)  # fmt: skip

        ours = ["--ep", "cpu", "--precision", "int4", "--no-smoke", "-q", "--json"]
        builder = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(moe), "-p", "int4", "-e", "cpu",
                   "-c", str(tmp / "builder-cache")]  # fmt: skip
        jobs: list[tuple[str, list[str], Path, dict | None, str]] = [
            ("gqa-export, MoE", ["gqa-export", "build", str(moe), "-o", str(tmp / "ours-moe"), *ours],
             tmp / "ours-moe", None, ""),
            ("official builder, MoE", [*builder, "-o", str(tmp / "builder-moe")], tmp / "builder-moe", None, ""),
        ]  # fmt: skip
        if args.builder_pythonpath:
            path = args.builder_pythonpath.resolve()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))}
            note = f"accelerate {accelerate_version(path)} on PYTHONPATH"
            jobs.append(("official builder + accelerate, MoE", [*builder, "-o", str(tmp / "builder-acc-moe")],
                         tmp / "builder-acc-moe", env, note))  # fmt: skip
        jobs.append(("gqa-export, dense", ["gqa-export", "build", str(dense), "-o", str(tmp / "ours-dense"), *ours],
                     tmp / "ours-dense", None, ""))  # fmt: skip
        runs: list[Run] = []
        for n, (name, cmd, out, env, note) in enumerate(jobs):
            json_out = tmp / f"export{n}.json" if cmd[0] == "gqa-export" else None
            run = measured(name, cmd, tmp / f"export{n}.log", stdout=json_out, env=env)
            run.note = note
            if run.error is None:
                run.package, run.package_bytes = out, model_bytes(out)
                run.ops = inspect_child(out)
            size = f"{run.package_bytes / MiB:.1f} MiB, {experts_label(run.ops)}"
            status = f"FAILED {run.error}" if run.error else size
            print(f"{name}: {run.seconds:.1f} s, peak RSS {run.peak / MiB:.0f} MiB, {status}", flush=True)
            runs.append(run)

        built = [r for r in runs if r.package is not None]
        decode: dict[tuple[str, int], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            order = built[r % len(built) :] + built[: r % len(built)] if built else []
            for t in threads:
                for run in order:
                    assert run.package is not None
                    result = decode_child(run.package, t)
                    decode.setdefault((run.name, t), []).append(result)
                    if "error" in result:
                        print(f"round {r + 1} {run.name} {t} thread(s): FAILED {result['error']}", flush=True)
                        continue
                    print(f"round {r + 1} {run.name} {t} thread(s): {result['tok_s']:.1f} tok/s, "
                          f"prefill {result['prefill_s'] * 1000:.0f} ms", flush=True)  # fmt: skip
        report = render(args, threads, make, shape, config, sizes, runs, decode, tmp)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(report)
        print(report)
        print(f"written: {args.results}")
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def render(args: argparse.Namespace, threads: list[int], make: Run, shape: dict, config: dict, sizes: dict[str, int],
           runs: list[Run], decode: dict, tmp: Path) -> str:  # fmt: skip
    def display(cmd: list[str]) -> str:
        text = shlex.join(cmd).replace(str(tmp), "$TMP").replace(sys.executable, "python")
        return text.replace(str(HERE), "benchmarks")

    def gb(n: int) -> str:
        return f"{n / MiB:.0f} MiB ({n / 1e9:.2f} GB)" if n >= 100 * MiB else f"{n / MiB:.2f} MiB"

    c = config
    kinds = ", ".join(t[0].upper() for t in c["layer_types"])  # S(liding) / F(ull)
    moe_desc = (
        f"hidden {c['hidden_size']}, {c['num_hidden_layers']} layers ({kinds}; window {c['sliding_window']}), "
        f"{c['num_attention_heads']} q / {c['num_key_value_heads']} kv heads x "
        f"{c['head_dim']}, {c['num_local_experts']} experts top-{c['num_experts_per_tok']} of width "
        f"{c['intermediate_size']}, vocab {c['vocab_size']}, untied"
    )
    lines = [
        f"# gpt-oss-shaped MoE ({args.shape}) to int4 CPU: gqa-export vs the official builder\n",
        f"{date.today()}. {machine_line()}\n",
        "## Checkpoints\n",
        f"Written by benchmarks/random_moe.py (numpy, no torch) in {make.seconds:.1f} s, peak RSS "
        f"{make.peak / MiB:.0f} MiB, both together. Random weights, N(0, 0.02); tokenizer: the tests' tiny BPE "
        "(vocab 384; prompts are ids < 384).\n",
        "| checkpoint | shape | safetensors | parameters | per token |",
        "|---|---|---|---|---|",
        f"| MoE: GptOssForCausalLM, experts MXFP4 (`_blocks`/`_scales`, as the releases), the rest bf16, "
        f"quantization_config mxfp4 | {moe_desc} | {gb(sizes['moe'])} | {shape['total'] / 1e6:,.1f} M "
        f"| {shape['active_per_token'] / 1e6:,.1f} M (attention + router + top-{c['num_experts_per_tok']} experts "
        "+ lm_head) |",
        f"| dense: LlamaForCausalLM, bf16 | same hidden, heads, layers, vocab; one MLP of width "
        f"{shape['dense_intermediate']} (= top-k x expert width); full attention, no biases/sinks | "
        f"{gb(sizes['dense'])} | {shape['dense_total'] / 1e6:,.1f} M | {shape['dense_per_token'] / 1e6:,.1f} M |\n",
        "## Export to int4, CPU\n",
        "Each export in its own process; peak RSS is that process's (wait4), imports included. Package size: "
        "model.onnx + external data.\n",
        "| tool | checkpoint | outcome | time | peak RSS | peak / checkpoint | package size | expert op, other int4 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        ckpt = sizes["dense" if run.name.endswith("dense") else "moe"]
        outcome = "failed: `" + run.error.replace("`", "'") + "`" if run.error else "ok"
        lines.append(
            f"| {run.name}{f' ({run.note})' if run.note else ''} | {'dense' if run.name.endswith('dense') else 'MoE'} "
            f"| {outcome} | {run.seconds:.1f} s | {run.peak / MiB:.0f} MiB | {run.peak / ckpt:.2f}x "
            f"| {gb(run.package_bytes) if run.package else '-'} | {experts_label(run.ops)} |"
        )
    if any(run.error and "requires Accelerate" in run.error for run in runs):
        lines.append(
            "\nThe builder loads the checkpoint with transformers' `from_pretrained`, and transformers refuses an "
            "MXFP4 checkpoint when `accelerate` is not installed (transformers/quantizers/quantizer_mxfp4.py). "
            "`--builder-pythonpath DIR` runs it again with DIR (e.g. `pip install --target DIR accelerate`) on its "
            "PYTHONPATH."
        )
    lines += [
        f"\n## Decode speed, CPU, prompt {PROMPT} + {NEW} new tokens\n",
        f"onnxruntime-genai, greedy, median of {args.rounds} rounds (all rounds in brackets), each a fresh process "
        "(load, warm-up generation, timed generation); rounds interleaved across packages and thread counts. "
        "decode tok/s = new tokens / time of the generate_next_token loop; prefill = append_tokens of the prompt.\n",
        "| package | params / token | threads | decode tok/s | prefill ms | vs dense |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        if run.package is None:
            continue
        per_token = shape["dense_per_token"] if run.name.endswith("dense") else shape["active_per_token"]
        for t in threads:
            results = [r for r in decode.get((run.name, t), []) if "error" not in r]
            errors = sorted({r["error"] for r in decode.get((run.name, t), []) if "error" in r})
            rates = [r["tok_s"] for r in results]
            dense = [r["tok_s"] for r in decode.get(("gqa-export, dense", t), []) if "error" not in r]
            if errors:
                error = "; ".join(errors).replace("`", "'")
                lines.append(f"| {run.name} | {per_token / 1e6:,.1f} M | {t} | failed: `{error}` | - | - |")
                continue
            ratio = f"{statistics.median(rates) / statistics.median(dense):.2f}x" if rates and dense else "-"
            lines.append(
                f"| {run.name} | {per_token / 1e6:,.1f} M | {t} | {median_cell(rates)} "
                f"| {median_cell([r['prefill_s'] * 1000 for r in results], '{:.0f}')} | {ratio} |"
            )
    flags = f"--shape {args.shape} --rounds {args.rounds} --threads {args.threads}"
    flags += " --builder-pythonpath DIR" if args.builder_pythonpath else ""
    lines += ["\n## Commands\n", "```sh", f"python benchmarks/moe_export.py {flags}", "# runs:", display(make.cmd)]
    for run in runs:
        prefix = "PYTHONPATH=DIR:$PYTHONPATH " if run.note else ""
        lines.append(prefix + display(run.cmd))
    lines += [
        f'# decode, per package and thread count: python -c "$DECODE" PACKAGE THREADS {PROMPT} {NEW} '
        "(DECODE in benchmarks/moe_export.py)",
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["_ops"]:  # child mode: python moe_export.py _ops PACKAGE
        print(json.dumps(graph_ops(Path(sys.argv[2]))))
    else:
        main()
