"""An RMSNorm without weight: x / sqrt(mean(x^2) + eps) over the last axis, fp32 inside (stash_type=1), as ORT's
SimplifiedLayerNormalization over a ones scale. One builder for every norm that holds no weight: the "rms_free" norm
kind (NanoChat's F.rms_norm, HRM-Text's, Muse-Spark's post-attention norm; graph/blocks.normalize), Ergo's per-expert
norm before its weight (graph/normed_experts.py) and the input-scaled norm's (graph/input_scaled_norm.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES


def weightless_rms(
    b: GraphBuilder, x: ir.Value, width: int, dtype: ir.DataType, eps: float, name: str, ones: str | None = None
) -> ir.Value:
    """x's RMSNorm over its last axis, `width` wide (0: a one-element scale broadcast), the node `name`, its ones scale
    a constant in `dtype` named `ones` (default f"{name}_ones")."""
    scale = b.const(np.ones(width or 1, NUMPY_DTYPES[dtype]), ones or f"{name}_ones")
    return b.op("SimplifiedLayerNormalization", x, scale, axis=-1, epsilon=eps, stash_type=1, name=name)
