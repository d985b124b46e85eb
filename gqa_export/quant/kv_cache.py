"""Quantized KV cache: int8 / int4 past and present through GroupQueryAttention's k_scale/v_scale.

GQA (com.microsoft, onnxruntime 1.31) quantizes the step's K (after RoPE) and V into the cache with
fixed scales and dequantizes on read: attributes `k_quant_type`/`v_quant_type` PER_TENSOR or
PER_CHANNEL (CPU needs them equal), `kv_cache_bit_width` 8 or 4, inputs 12/13 `k_scale`/`v_scale`
float32 of [1] or [kv_heads * head_dim]; the cache is int8, or uint8 with head_dim/2 (two 4-bit
values a byte). Probed on CPU: prompt and decode run, in place on the shared buffer too (bit-identical
to separate buffers); fp8 has no CPU kernel. onnxruntime-genai 0.18 takes the cache dtype and shape
from the graph's past inputs and needs no config key.

The scales are calibrated, not guessed: the float package just written runs a calibration text
(`--kv-calibration FILE`, else CALIBRATION_TEXT) through onnxruntime-genai on CPU (the decode
loop of runtime/decode.py); each layer's max |K|
and |V| (per channel or per tensor) times HEADROOM / qmax is its scale. Only model.onnx changes (the
weights file is untouched). The same prompt then decodes DRIFT_STEPS greedy tokens with the float
cache and, teacher-forced on those tokens, with the quantized one: the logit drift is recorded in
the manifest (`options.kv_cache.drift`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.choices import KV_CACHE_DTYPES, KV_SCALES
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.request.records import KvQuantOptions

_BITS = {"int8": 8, "int4": 4}
_QMAX = {8: 127.0, 4: 7.0}
HEADROOM = 1.25  # values past the calibrated range saturate; a quarter more range costs little
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


def check_kv_options(kv: KvQuantOptions, ep: str, attention_mode: str, io_dtype_name: str) -> None:
    """One line for a quantized cache this build cannot have."""
    if not kv.quantized:
        return
    if kv.dtype not in KV_CACHE_DTYPES:
        raise InputError(f"unknown --kv-cache '{kv.dtype}'; choose {' or '.join(KV_CACHE_DTYPES)}")
    if kv.scales not in KV_SCALES:
        raise InputError(f"unknown --kv-scales '{kv.scales}'; choose {' or '.join(KV_SCALES)}")
    if kv.dtype not in EPS[ep].kv_cache_dtypes:
        raise InputError(
            f"--kv-cache {kv.dtype} has no kernel with --ep {ep}; use {' or '.join(EPS[ep].kv_cache_dtypes)}"
        )
    if attention_mode != "gqa":
        raise InputError(
            f"--kv-cache {kv.dtype} needs GroupQueryAttention's k_scale/v_scale; --attention {attention_mode} "
            "has none: use --attention gqa"
        )
    if io_dtype_name == "BFLOAT16":
        raise InputError("--kv-cache is calibrated on CPU, which has no bf16 GroupQueryAttention; use fp16")


def quantize_kv_cache(package: Path, graph_file: str, kv: KvQuantOptions, max_length: int) -> dict[str, Any]:
    """Calibrate scales on the float package in `package`, rewrite `graph_file` for a quantized
    cache, and measure the drift; returns the manifest entry."""
    import onnx

    path = package / graph_file
    model = onnx.load(str(path), load_external_data=False)
    nodes = _gqa_nodes(model)
    tokens = _calibration_tokens(package, kv.calibration, max_length)
    float_run = _run(package, graph_file, tokens, DRIFT_STEPS, forced=None)
    bits = _BITS[str(kv.dtype)]
    for layer, node in nodes.items():
        k_max, v_max = float_run.kv_absmax[layer]
        for which, amax in (("k", k_max), ("v", v_max)):
            values = amax.reshape(-1) if kv.scales == "per-channel" else np.array([amax.max()])
            scale = np.maximum(values * HEADROOM, 1e-6) / _QMAX[bits]
            name = f"model.layers.{layer}.attn.{which}_scale"
            model.graph.initializer.append(onnx.numpy_helper.from_array(scale.astype(np.float32), name))
            while len(node.input) < 14:
                node.input.append("")
            node.input[12 if which == "k" else 13] = name
        kind = "PER_CHANNEL" if kv.scales == "per-channel" else "PER_TENSOR"
        node.attribute.extend(
            [
                onnx.helper.make_attribute("k_quant_type", kind),
                onnx.helper.make_attribute("v_quant_type", kind),
                onnx.helper.make_attribute("kv_cache_bit_width", bits),
            ]
        )
    _retype_cache(model, bits)
    onnx.save(model, str(path))
    quant_run = _run(package, graph_file, tokens, DRIFT_STEPS, forced=float_run.generated)
    diff = np.abs(quant_run.logits - float_run.logits)
    agree = float((quant_run.logits.argmax(-1) == float_run.logits.argmax(-1)).mean())
    return {
        "dtype": kv.dtype,
        "scales": kv.scales,
        "calibration": kv.calibration.name if kv.calibration else "builtin",
        "calibration_tokens": len(tokens),
        "headroom": HEADROOM,
        "drift": {
            "decode_steps": DRIFT_STEPS,
            "max_abs_logit_diff": round(float(diff.max()), 6),
            "mean_abs_logit_diff": round(float(diff.mean()), 6),
            "top1_agreement": round(agree, 4),
        },
    }


def _gqa_nodes(model: Any) -> dict[int, Any]:
    """layer -> its GQA node; refuses graphs whose cache the scales cannot cover."""
    inputs = {i.name for i in model.graph.input}
    nodes = {}
    for node in model.graph.node:
        if node.op_type != "GroupQueryAttention":
            continue
        past = node.input[3] if len(node.input) > 3 else ""
        if past not in inputs or len(node.output) < 3:
            raise InputError("--kv-cache cannot quantize KV-shared layers (their cache is another layer's)")
        attrs = {a.name: a for a in node.attribute}
        if "sliding_window_cache" in attrs and attrs["sliding_window_cache"].i:
            raise InputError(
                "--kv-cache cannot be combined with window-sized KV buffers (attention.sliding_window_cache)"
            )
        if len(node.input) > 10 and node.input[10]:
            raise InputError("--kv-cache cannot be combined with GQA's attention bias (attention.bias_op gqa)")
        nodes[int(past.split(".")[1])] = node
    if not nodes:
        raise InputError("--kv-cache needs GroupQueryAttention nodes; this graph has none")
    return nodes


def _retype_cache(model: Any, bits: int) -> None:
    """past_key_values.* / present.* become int8, or uint8 with head_dim / 2 for 4 bits."""
    import onnx

    for value in [*model.graph.input, *model.graph.output]:
        if not (value.name.startswith("past_key_values.") or value.name.startswith("present.")):
            continue
        tensor = value.type.tensor_type
        tensor.elem_type = onnx.TensorProto.INT8 if bits == 8 else onnx.TensorProto.UINT8
        if bits == 4:
            last = tensor.shape.dim[3]
            last.dim_value = last.dim_value // 2


def _calibration_tokens(package: Path, text_file: Path | None, max_length: int) -> list[int]:
    from gqa_export.runtime.evaluate import read_text, tokenize

    text = read_text(text_file) if text_file else CALIBRATION_TEXT
    tokens = tokenize(package, text)
    room = max(2, max_length - DRIFT_STEPS - 1)
    tokens = (tokens * (1 + CALIBRATION_TOKENS // max(1, len(tokens))))[: min(CALIBRATION_TOKENS, room)]
    if len(tokens) < 2:
        raise InputError("the KV calibration text gives fewer than 2 tokens; pass a longer --kv-calibration file")
    return tokens


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
