"""The KV-cache scales calibrated, and the drift of the quantized cache measured, by running the
float package through onnxruntime-genai (`--kv-cache int8|int4`).

The float package just written runs a calibration text (`--kv-calibration FILE`, else
CALIBRATION_TEXT) through onnxruntime-genai on CPU (the decode loop of runtime/decode.py); each
layer's max |K| and |V| over the prompt's positions sets its scales, which quant/kv_cache.py writes
into the graph. The same prompt then decodes DRIFT_STEPS greedy tokens with the float cache and,
teacher-forced on those tokens, with the quantized one: the logit drift is recorded in the manifest
(`options.kv_cache.drift`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.quant.kv_cache import HEADROOM, KvQuantOptions, gqa_nodes, write_kv_scales

CALIBRATION_TOKENS = 512
DRIFT_STEPS = 16
CALIBRATION_TEXT = (
    "The history of science is the study of the development of science and scientific knowledge, "
    "including both the natural and social sciences. Science is a body of empirical, theoretical, and "
    "practical knowledge about the natural world, produced by scientists who emphasize the observation, "
    "explanation, and prediction of real-world phenomena. In the early modern period, the works of "
    "Copernicus, Galileo, Kepler and Newton changed how people understood the heavens and the earth. "
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
    "Question: What is 17 times 23? Answer: 17 times 23 is 391, because 17 * 20 = 340 and 17 * 3 = 51. "
    "Les langues romanes sont issues du latin vulgaire. Die Wissenschaft ist ein System des Wissens. "
    "In a small village by the sea, an old fisherman mended his nets every morning before dawn, "
    "telling stories of storms and quiet harbors to anyone who would listen. Numbers: 3.14159, 2.71828, "
    '1,000,000; dates: 1969-07-20; a URL: https://example.com/path?query=1; JSON: {"key": [1, 2, 3]}.'
)


def quantize_kv_cache(package: Path, graph_file: str, kv: KvQuantOptions, max_length: int) -> dict[str, Any]:
    """Calibrate scales on the float package in `package`, rewrite `graph_file` for a quantized
    cache, and measure the drift; returns the manifest entry."""
    import onnx

    path = package / graph_file
    model = onnx.load(str(path), load_external_data=False)
    nodes = gqa_nodes(model)
    tokens, steps = _calibration_tokens(package, kv.calibration, max_length)
    float_run = _run(package, graph_file, tokens, steps, forced=None)
    write_kv_scales(model, nodes, kv, float_run.kv_absmax)
    onnx.save(model, str(path))
    quant_run = _run(package, graph_file, tokens, steps, forced=float_run.generated)
    diff = np.abs(quant_run.logits - float_run.logits)
    agree = float((quant_run.logits.argmax(-1) == float_run.logits.argmax(-1)).mean())
    return {
        "dtype": kv.dtype,
        "scales": kv.scales,
        "calibration": kv.calibration.name if kv.calibration else "builtin",
        "calibration_tokens": len(tokens),
        "headroom": HEADROOM,
        "drift": {
            "decode_steps": steps,
            "max_abs_logit_diff": round(float(diff.max()), 6),
            "mean_abs_logit_diff": round(float(diff.mean()), 6),
            "top1_agreement": round(agree, 4),
        },
    }


def _calibration_tokens(package: Path, text_file: Path | None, max_length: int) -> tuple[list[int], int]:
    """The calibration prompt and the drift's decode steps, together within max_length: up to
    CALIBRATION_TOKENS then DRIFT_STEPS; a context too short for both (max_position_embeddings 16)
    shares it, about half each."""
    from gqa_export.runtime.evaluate import read_text, tokenize

    text = read_text(text_file) if text_file else CALIBRATION_TEXT
    tokens = tokenize(package, text)
    room = max_length - DRIFT_STEPS - 1
    room = room if room >= 2 else max(2, (max_length - 1) // 2)
    tokens = (tokens * (1 + CALIBRATION_TOKENS // max(1, len(tokens))))[: min(CALIBRATION_TOKENS, room)]
    if len(tokens) < 2:
        raise InputError("the KV calibration text gives fewer than 2 tokens; pass a longer --kv-calibration file")
    return tokens, min(DRIFT_STEPS, max_length - 1 - len(tokens))


@dataclass
class _Run:
    logits: np.ndarray  # [DRIFT_STEPS, V] decode-step logits
    generated: list[int]
    kv_absmax: dict[int, tuple[np.ndarray, np.ndarray]]  # layer -> (max|K|, max|V|) [kv, head_dim]


def _run(package: Path, graph_file: str, prompt: list[int], steps: int, forced: list[int] | None) -> _Run:
    """Prompt then `steps` decode steps on CPU through onnxruntime-genai (runtime/decode.py):
    greedy, or teacher-forced on `forced`; each layer's max |K| and |V| over the prompt's positions."""
    import onnx

    from gqa_export.runtime.decode import decode_steps
    from gqa_export.runtime.run import load

    graph = onnx.load(str(package / graph_file), load_external_data=False).graph
    presents = tuple(
        o.name for o in graph.output if o.name.startswith("present.") and o.name.endswith((".key", ".value"))
    )
    run = decode_steps(load(package, "cpu"), prompt, steps, forced, capture=presents)
    absmax: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for name, present in run.after_prompt.items():
        layer, which = int(name.split(".")[1]), name.rsplit(".", 1)[1]
        amax = np.abs(present[:, :, : len(prompt)].astype(np.float32)).max(axis=(0, 2))  # [kv, head_dim]
        k, v = absmax.get(layer, (None, None))
        absmax[layer] = (amax, v) if which == "key" else (k, amax)  # type: ignore[assignment]
    return _Run(run.logits, run.tokens, absmax)
