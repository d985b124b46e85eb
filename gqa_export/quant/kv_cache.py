"""Quantized KV cache: int8 / int4 past and present through GroupQueryAttention's k_scale/v_scale.

GQA (com.microsoft, onnxruntime 1.31) quantizes the step's K (after RoPE) and V into the cache with
fixed scales and dequantizes on read: attributes `k_quant_type`/`v_quant_type` PER_TENSOR or
PER_CHANNEL (CPU needs them equal), `kv_cache_bit_width` 8 or 4, inputs 12/13 `k_scale`/`v_scale`
float32 of [1] or [kv_heads * head_dim]; the cache is int8, or uint8 with head_dim/2 (two 4-bit
values a byte). Probed on CPU: prompt and decode run, in place on the shared buffer too (bit-identical
to separate buffers); fp8 has no CPU kernel. onnxruntime-genai 0.18 takes the cache dtype and shape
from the graph's past inputs and needs no config key.

This module is the graph rewrite: each layer's calibrated max |K| and |V| (per channel or per
tensor) times HEADROOM / qmax is its scale, written into model.onnx with the attributes and the
cache's new element type (the weights file is untouched). The calibration itself, and the drift
it records, run the float package through onnxruntime-genai (runtime/kv_calibration.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gqa_export.choices import KV_CACHE_DTYPES, KV_SCALES
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.request.records import KvQuantOptions

_BITS = {"int8": 8, "int4": 4}
_QMAX = {8: 127.0, 4: 7.0}
HEADROOM = 1.25  # values past the calibrated range saturate; a quarter more range costs little


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


# the calibration's two prompt tokens, one drift decode step and its token (runtime/kv_calibration.py)
KV_MIN_MAX_LENGTH = 4


def check_kv_length(kv: KvQuantOptions, max_length: int) -> None:
    """A quantized cache is calibrated on a prompt and measured over decode steps inside max_length."""
    if kv.quantized and max_length < KV_MIN_MAX_LENGTH:
        raise InputError(
            f"--kv-cache {kv.dtype} calibrates on a prompt and measures decode steps, which needs a max_length of "
            f"{KV_MIN_MAX_LENGTH} or more, got {max_length}; build without --kv-cache or with a longer --max-length"
        )


def write_kv_scales(
    model: Any, nodes: dict[int, Any], kv: KvQuantOptions, kv_absmax: dict[int, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Each layer's scales from its calibrated max |K| and |V| ([kv, head_dim]) into `model`: the
    k_scale/v_scale initializers and inputs of its GQA node, the quantization attributes, and the
    past/present cache retyped for `kv.dtype`."""
    import onnx

    bits = _BITS[str(kv.dtype)]
    for layer, node in nodes.items():
        k_max, v_max = kv_absmax[layer]
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


def gqa_nodes(model: Any) -> dict[int, Any]:
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
            raise InputError(
                "--kv-cache cannot be combined with GQA's attention bias (attention.bias_op gqa, or the relative "
                "position bias of a family such as Inkling)"
            )
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
