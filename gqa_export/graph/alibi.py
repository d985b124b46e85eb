"""ALiBi position biases (Bloom, MPT): no RoPE; each head h adds slope_h * (key position - query
position) to its attention scores, after the 1/sqrt(d) scaling (docs/architecture.md §2.3).

HF adds slope_h * key position (Bloom) or slope_h * (key slot - last slot) (MPT): the same up to a
constant per query row, which softmax ignores; the distance form keeps the bias small at any
position. GroupQueryAttention has no per-head additive bias input that onnxruntime-genai feeds, so
these families run in mode `bias` (standard Attention with the additive mask) only. The slopes are
read from the config with the other dimensions (model/alibi.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.masks import MaskValues
from gqa_export.graph.params import WIDER_THAN_IO_META


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
        per_head.meta[WIDER_THAN_IO_META] = True  # float32 in every package: the bias is cast to the io dtype after
        bias = b.op("Mul", distance, per_head)  # [B,H,S,T]
        return bias if dtype == ir.DataType.FLOAT else b.op("Cast", bias, to=dtype, name="bias_cast")
