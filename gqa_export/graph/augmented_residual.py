"""The learned augmented residual (LAuReL) beside attention (docs/gemma3n.md §1.4).

With x the layer's normed input and h the residual after attention (h = r + post_norm(attn(x))):
`h' = (h + x + post_laurel_norm(linear_right(linear_left(x)))) / sqrt(2)`, a rank-r linear map
of x (linear_left H -> r, linear_right r -> H, no biases) added with its own RMSNorm; the MLP then
reads h'. The division is by sqrt(2) as a float32 constant, as HF divides a float32 tensor."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import typed
from gqa_export.graph.params import NUMPY_DTYPES


def augmented_residual(lc: LayerContext, h: ir.Value, x: ir.Value) -> ir.Value:
    """(h + x + norm(right(left(x)))) / sqrt(2) [B,S,H]."""
    names, b, hidden, dtype = lc.spec.augmented_residual, lc.b, lc.dims.hidden_size, lc.params.dtype
    assert names is not None
    with b.scope("laurel"):
        low_rank = linear(lc, linear(lc, x, [names.left], None, "left"), [names.right], None, "right")
        augmented = b.op("Add", x, normalize(b, low_rank, lc.name(names.norm), lc.params, lc.dims, "norm", hidden))
        root2 = b.const(np.asarray(math.sqrt(2), np.float32).astype(NUMPY_DTYPES[dtype]), "sqrt2")
        out = b.op("Div", b.op("Add", h, augmented), root2, name="residual")
        return typed(out, dtype, ["batch_size", "sequence_length", hidden])
