"""Symmetric or asymmetric int4 by default? Perplexity on held-out text for trained checkpoints.

    python benchmarks/int4_zero_points.py [--train] [--results FILE]

Issue #40 asks the int4 default (zero points or none) to be decided on speed and on quality measured
on trained checkpoints, with a third, larger model trained for a few minutes because two tiny ones
disagree. The checkpoints (all Llama, trained by tests/data/train_tiny.py on tests/data/tiny-text,
scored on its eval.txt, which training never reads):

- `tiny-trained`: the test fixture (2 layers, hidden 96), committed in tests/data;
- `tiny-seed1`: the same shape and steps trained from seed 1 (does the answer hold across seeds?);
- `small`: 4 layers, hidden 192, intermediate 512, 6 / 2 heads, 600 steps of 16 sequences (about
  3x the fixture's training compute, 8x its parameters).

`--train` (re)trains the last two into benchmarks/.cache/ (minutes on 2 cores); without it they are
reused from there. Each checkpoint is built at fp32, int4 asymmetric (the default) and int4
`--symmetric` (rtn, block 32, accuracy level 4 on CPU) and scored with `gqa-export eval --window 512`
(stride 256); the table gives the perplexity and its increase over the fp32 package. Results go to
benchmarks/results/int4_zero_points.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache" / "int4_zero_points"
TEXT = ROOT / "tests" / "data" / "tiny-text" / "eval.txt"
RESULTS = HERE / "results" / "int4_zero_points.md"
# name -> (train_tiny.py arguments, or None for the committed fixture)
CHECKPOINTS: dict[str, list[str] | None] = {
    "tiny-trained": None,
    "tiny-seed1": ["--seed", "1"],
    "small": [
        "--steps", "600", "--batch", "16", "--lr", "2e-3",
        "--config", "hidden_size=192", "--config", "intermediate_size=512", "--config", "num_hidden_layers=4",
        "--config", "num_attention_heads=6", "--config", "num_key_value_heads=2",
    ],
}  # fmt: skip
VARIANTS = {
    "fp32": ["-p", "fp32"],
    "int4 asymmetric (default)": ["-p", "int4"],
    "int4 symmetric": ["-p", "int4", "--symmetric"],
}


def checkpoint(name: str, train: bool) -> Path:
    args = CHECKPOINTS[name]
    if args is None:
        return ROOT / "tests" / "data" / "tiny-trained"
    out = CACHE / name
    if train or not (out / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "train_tiny.py"), *args, "--out", str(out)],
                       check=True)  # fmt: skip
    return out


def perplexity(ckpt: Path, flags: list[str], root: Path) -> tuple[float, int]:
    """(perplexity on eval.txt, model data bytes) of one package built from `ckpt`."""
    out = root / f"{ckpt.name}-{'-'.join(flags)}"
    subprocess.run(["gqa-export", "build", str(ckpt), "-o", str(out), *flags, "--no-smoke", "-q"], check=True)
    done = subprocess.run(["gqa-export", "eval", str(out), "--text", str(TEXT), "--window", "512", "--json"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    data = sum(p.stat().st_size for p in out.glob("model.onnx*"))
    return json.loads(done.stdout)["perplexity"], data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", action="store_true", help="retrain the cached checkpoints")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in CHECKPOINTS:
            ckpt = checkpoint(name, args.train)
            params = json.loads((ckpt / "config.json").read_text())
            shape = f"{params['num_hidden_layers']}x{params['hidden_size']}"
            scores = {v: perplexity(ckpt, flags, Path(tmp)) for v, flags in VARIANTS.items()}
            base = scores["fp32"][0]
            for variant, (ppl, data) in scores.items():
                rows.append(f"| {name} | {shape} | {variant} | {data:,} | {ppl:.4f} | {100 * (ppl / base - 1):+.2f}% |")
                print(rows[-1], flush=True)
    text = (
        f"\n## {date.today()}: {platform.machine()}, eval.txt, window 512\n\n"
        "| checkpoint | layers x hidden | package | model bytes | perplexity | vs fp32 |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    if not args.results.exists():
        args.results.write_text("# int4 with or without zero points, on trained checkpoints (issue #40)\n")
    with args.results.open("a") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
