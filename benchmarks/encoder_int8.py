"""What 8-bit weights (MatMulNBits) in the vision encoder do to the features and to the greedy
tokens, on the tiny full-package test checkpoints (docs/multimodal.md §17).

    python benchmarks/encoder_int8.py [--write-results]

For each tiny checkpoint (tests/: Gemma-3, Mistral-3, Qwen2.5-VL, Qwen3.5, Qwen3-VL with deepstack,
Gemma-4), the float fp32 CPU package is built once, then again with `--encoder-precision int8`
(the vision graph's linears in 8-bit MatMulNBits: block 32, asymmetric round-to-nearest,
accuracy level 0 = float compute), and compared on the same PNG through onnxruntime (features) and
onnxruntime-genai (prompt logits, 20 greedy tokens with the image):

- features: relative Frobenius error ||f8 - f|| / ||f|| and max |f8 - f| / max |f|;
- logits: max |Δ| of the prompt logits (vs the logit range);
- tokens: equal, or the first new token where they part.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = ROOT / "benchmarks" / "results" / "encoder_int8.md"
NEW = 20


def _checkpoints(folder: Path) -> dict[str, tuple[Path, str, tuple[int, int]]]:
    """name -> (checkpoint, prompt with the model's marker, PNG size (w, h))."""
    from gemma4_models import save_gemma4
    from multimodal_models import save_multimodal
    from qwen_vl_package import MARKER, save_qwen_vl

    return {
        "gemma3": (save_multimodal(folder / "gemma3", "gemma3_full"), "Look<start_of_image> at this", (64, 64)),
        "mistral3": (save_multimodal(folder / "mistral3", "mistral3_full"), "[IMG]\nDescribe", (48, 32)),
        "qwen2_5_vl": (save_qwen_vl(folder / "q25", "qwen2_5_vl"), "hi " + MARKER + " tell", (84, 56)),
        "qwen3_5": (save_qwen_vl(folder / "q35", "qwen3_5"), "hi " + MARKER + " tell", (96, 64)),
        "qwen3_vl_deepstack": (save_qwen_vl(folder / "q3ds", "qwen3_vl_deepstack"), "hi " + MARKER + " tell", (96, 64)),
        "gemma4": (save_gemma4(folder / "gemma4", "full"), "<|image|>Describe", (120, 84)),
    }


def _png(path: Path, size: tuple[int, int]) -> str:
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return str(path)


def _features(package: Path, inputs: object) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(package / "vision.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: inputs[n].as_numpy() for n in names})[0]  # type: ignore[index]


def _generate(package: Path, prompt: str, image: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(the vision features, prompt logits, greedy tokens) through genai's processor."""
    import onnxruntime_genai as og

    model = og.Model(str(package))
    inputs = model.create_multimodal_processor()(prompt, images=og.Images.open(image))
    features = _features(package, inputs)
    length = int(inputs["input_ids"].as_numpy().shape[-1])
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=length + NEW, min_length=length + NEW)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens, logits = [], None
    while not generator.is_done():
        generator.generate_next_token()
        if logits is None:
            logits = np.asarray(generator.get_output("logits"))[0]
        tokens.append(int(generator.get_next_tokens()[0]))
    return features, logits, tokens


def measure(name: str, checkpoint: Path, prompt: str, image: str, out: Path) -> dict[str, object]:
    from gqa_export.pipeline import BuildOptions, build

    packages = {}
    for precision in ("float", "int8"):
        packages[precision] = out / f"{name}-{precision}"
        build(BuildOptions(str(checkpoint), packages[precision], smoke=False, encoder_precision=precision))
    f, logits, tokens = _generate(packages["float"], prompt, image)
    f8, logits8, tokens8 = _generate(packages["int8"], prompt, image)
    parted = next((i for i, (a, b) in enumerate(zip(tokens, tokens8, strict=True)) if a != b), None)
    return {
        "model": name,
        "rel": float(np.linalg.norm(f8 - f) / np.linalg.norm(f)),
        "max": float(np.abs(f8 - f).max() / np.abs(f).max()),
        "logits": float(np.abs(logits8 - logits).max()),
        "range": float(np.ptp(logits)),
        "tokens": "equal" if parted is None else f"part at {parted}",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, (checkpoint, prompt, size) in _checkpoints(root / "ckpt").items():
            row = measure(name, checkpoint, prompt, _png(root / f"{name}.png", size), root / "pkg")
            rows.append(row)
            print(row, flush=True)
    table = [
        "| checkpoint | features rel. error | max Δ / max |f| | prompt logits max Δ (range) | 20 greedy tokens |",
        "|---|---|---|---|---|",
        *[
            f"| {r['model']} | {r['rel']:.2e} | {r['max']:.2e} | {r['logits']:.2e} ({r['range']:.1f}) | {r['tokens']} |"
            for r in rows
        ],
    ]
    print("\n".join(table))
    if args.write_results:
        RESULTS.write_text(
            "# Vision encoder in int8 (MatMulNBits 8-bit, block 32, asymmetric, accuracy level 0)\n\n"
            "`python benchmarks/encoder_int8.py --write-results`: the tiny test checkpoints, fp32 CPU package "
            "vs the same with `--encoder-precision int8`, one random-pixel PNG each (docs/multimodal.md §17).\n\n"
            + "\n".join(table)
            + "\n"
        )


if __name__ == "__main__":
    main()
