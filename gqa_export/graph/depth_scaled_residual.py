"""Depth-scaled residual adds (ArchSpec.residual_scale "add_index", Beam's depth_scaled_residual_add).

The stream's k-th add (the embedding counted as the first: layer i's attention add is k = 2(i + 1),
its MLP add k + 1) sums block / sqrt(k) + residual * sqrt((k - 1) / k), so the stream keeps unit
variance when each block's output has it. Both factors are constants of the layer index, computed
in double precision as the modeling code's math.sqrt does and rounded once to the graph's dtype.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import float_scalar

ADD_OFFSETS = {"residual_attn": 0, "residual_mlp": 1}  # the layer's two adds, by their node names


def depth_scaled_terms(lc: LayerContext, residual: ir.Value, block: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
    """(residual, block) each times its factor for the add `name` of layer lc.i, to be summed."""
    if name not in ADD_OFFSETS:  # a parallel layer's single add has no index in this form
        raise ValueError(f"a depth-scaled residual add has no index for {name!r}")
    k = 2 * (lc.i + 1) + ADD_OFFSETS[name]
    b, dtype = lc.b, lc.params.dtype
    block = b.op("Mul", block, float_scalar(b, 1.0 / math.sqrt(k), dtype, "block_depth_scale"), name=f"{name}_block")
    kept = float_scalar(b, math.sqrt((k - 1) / k), dtype, "residual_depth_scale")
    return b.op("Mul", residual, kept, name=f"{name}_kept"), block
