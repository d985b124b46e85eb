"""`eval` on a `--prune-lm-head` package: the full-logits view against stepping, beside a full package.

    python benchmarks/eval_pruned.py [--shape 150m] [--tokens 3000] [--window 1024]

Builds the random-weight Llama of `--shape` (cpu fp32) with full logits and with `--prune-lm-head`,
then scores the same `--tokens` synthetic ids over windows of `--window` (stride window/2) three
ways in one process: the full package, the pruned package through its full-logits view
(runtime/decode.py, the shipped path) and the pruned package stepped one token at a time (the
path before the view; forced here by disabling the view). Reports seconds and the perplexities,
which must agree. Results are appended to benchmarks/results/eval_pruned.md.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "eval_pruned.md"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="150m")
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--window", type=int, default=1024)
    args = parser.parse_args()

    import numpy as np

    from gqa_export.graph.io_options import IoOptions
    from gqa_export.pipeline import BuildOptions, build
    from gqa_export.runtime import decode
    from gqa_export.runtime.evaluate import score

    work = Path(tempfile.mkdtemp(prefix="eval-pruned-"))
    checkpoint = work / "hf"
    subprocess.run([sys.executable, str(HERE / "random_llama.py"), str(checkpoint), "--shape", args.shape], check=True)
    full, pruned = work / "full", work / "pruned"
    build(BuildOptions(str(checkpoint), full, smoke=False, max_length=args.window))
    build(BuildOptions(str(checkpoint), pruned, smoke=False, max_length=args.window, io=IoOptions(prune_lm_head=True)))
    tokens = (np.arange(args.tokens) * 7919 % 30000 + 100).tolist()
    stride = args.window // 2

    def timed(package: Path) -> tuple[float, float]:
        start = time.perf_counter()
        scores = score(package, tokens, args.window, stride, "cpu")
        return time.perf_counter() - start, scores.perplexity

    rows = [("full logits", *timed(full)), ("--prune-lm-head, full-logits view (shipped)", *timed(pruned))]
    view = decode.full_logits_view
    decode.full_logits_view = lambda package: None  # the path before the view: one run per position
    try:
        rows.append(("--prune-lm-head, stepped token by token", *timed(pruned)))
    finally:
        decode.full_logits_view = view

    lines = [
        f"\n## {date.today()}: {args.shape} random Llama, cpu fp32, {args.tokens} tokens, window {args.window}, "
        f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores\n",
        "| package | eval seconds | perplexity |",
        "|---|---|---|",
        *[f"| {name} | {seconds:.1f} | {ppl:.6f} |" for name, seconds, ppl in rows],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not RESULTS.exists():
        RESULTS.write_text("# eval on last-token-logits packages\n\n" + __doc__.split("\n\n", 1)[1])
    with RESULTS.open("a") as out:
        out.write(text)


if __name__ == "__main__":
    main()
