"""ALiBi position biases (Bloom, MPT): no RoPE; each head h adds slope_h * (key position - query
position) to its attention scores, after the 1/sqrt(d) scaling (docs/architecture.md §2.3).

HF adds slope_h * key position (Bloom) or slope_h * (key slot - last slot) (MPT): the same up to a
constant per query row, which softmax ignores; the distance form keeps the bias small at any
position. GroupQueryAttention has no per-head additive bias input that onnxruntime-genai feeds, so
these families run in mode `bias` (standard Attention with the additive mask) only.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.masks import MaskValues

# transformers' MptModel builds its ALiBi with the default bias max whatever the config says
MPT_BIAS_MAX = 8


def alibi_slopes(kind: str, heads: int, bias_max: float = MPT_BIAS_MAX) -> tuple[float, ...]:
    """The per-head slopes, in float32 as HF computes them (arch.spec.ALIBI_SLOPES)."""
    if kind == "geometric":  # Press et al.: 2^(-8 i / n) for the closest power of two, then odd extras
        closest = 2 ** math.floor(math.log2(heads))
        base = np.float32(2 ** (-(2 ** -(math.log2(closest) - 3))))
        slopes = [base ** np.float32(p) for p in range(1, closest + 1)]
        if closest != heads:
            extra = np.float32(2 ** (-(2 ** -(math.log2(2 * closest) - 3))))
            remaining = min(closest, heads - closest)
            slopes += [extra ** np.float32(p) for p in range(1, 2 * remaining, 2)]
        return tuple(float(np.float32(s)) for s in slopes)
    if kind == "bias_max":  # MPT: 1 / 2^(bias_max i / n2) over the next power of two n2, odd ones first
        if float(bias_max) != MPT_BIAS_MAX:
            raise InputError(
                f"alibi_bias_max {bias_max}: transformers' MPT always uses {MPT_BIAS_MAX} (the original code "
                "honours the config), so no export can match both; set alibi_bias_max to 8 or convert the model"
            )
        n2 = 2 ** math.ceil(math.log2(heads))
        base = np.arange(1, n2 + 1, dtype=np.int64).astype(np.float32) * np.float32(MPT_BIAS_MAX / n2)
        slopes = (np.float32(1.0) / np.power(np.float32(2), base)).astype(np.float32)
        if n2 != heads:
            slopes = np.concatenate([slopes[1::2], slopes[::2]])[:heads]
        return tuple(float(s) for s in slopes)
    raise InputError(f"unknown ALiBi slope kind '{kind}'")


def alibi_bias(b: GraphBuilder, masks: MaskValues, slopes: tuple[float, ...], dtype: ir.DataType) -> ir.Value:
    """[B, H, S, T] slope_h * (key position - query position), from the mask's own positions (the
    key positions of its slot layout: cumsum of attention_mask when concatenating, slot index in
    the shared buffer) so it lines up with the mask it is added to."""
    assert masks.key_positions is not None
    with b.scope("alibi"):
        keys = b.op("Unsqueeze", masks.key_positions, b.const([1], "head_axis", "int64"))  # [B,1,1,T]
        queries = b.op("Unsqueeze", masks.positions, b.const([1, 3], "query_axes", "int64"))  # [B,1,S,1]
        distance = b.op("Cast", b.op("Sub", keys, queries), to=ir.DataType.FLOAT)
        per_head = b.const(np.asarray(slopes, np.float32).reshape(1, -1, 1, 1), "alibi_slopes")
        bias = b.op("Mul", distance, per_head)  # [B,H,S,T]
        return bias if dtype == ir.DataType.FLOAT else b.op("Cast", bias, to=dtype, name="bias_cast")
