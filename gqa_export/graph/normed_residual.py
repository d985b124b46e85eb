"""A pre-norm layer whose residual is each block's normed input, both sides scaled (MiniMax's
layers, spec `normed_residual`; docs/hybrid-state.md §8.16):

    x = input_layernorm(h);           h = alpha_m * x + beta_m * mixer(x)
    x = post_attention_layernorm(h);  h = alpha_mlp * x + beta_mlp * mlp(x)

The stream entering a layer reaches the next one only through the norms: what is added back is x,
not h. alpha and beta are config constants per block kind, the mixer's pair set by whether it is
full attention or the recurrent-state mixer. They are applied as Mul nodes in HF's order (residual
times alpha plus block times beta), each left out where it is 1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import typed
from gqa_export.graph.params import NUMPY_DTYPES

B, S = "batch_size", "sequence_length"
Norm = Callable[[LayerContext, ir.Value, str | None, str], ir.Value]
Mlp = Callable[[LayerContext, ir.Value, ir.Value], ir.Value]


def normed_residual_layer(lc: LayerContext, x: ir.Value, y: ir.Value, mixer: str, norm: Norm, mlp: Mlp) -> ir.Value:
    """The layer's output from its normed input x and its mixer's output y; `mixer` "attention" or
    "state" picks the pair of factors; norm and mlp are the decoder's (graph/decoder.py)."""
    h = scaled_sum(lc, x, y, mixer, "residual_attn")
    x = norm(lc, h, lc.spec.layer.post_attention_norm, "post_attention_layernorm")
    with lc.b.scope("mlp"):
        out = mlp(lc, x, h)
    return scaled_sum(lc, x, out, "mlp", "residual_mlp")


def scaled_sum(lc: LayerContext, residual: ir.Value, y: ir.Value, kind: str, name: str) -> ir.Value:
    """alpha * residual + beta * y with the (alpha, beta) of block `kind` (ModelDims.residual_factors)."""
    assert lc.dims.residual_factors is not None
    alpha, beta = lc.dims.residual_factors[kind]
    residual, y = _times(lc, residual, alpha, f"{name}_alpha"), _times(lc, y, beta, f"{name}_beta")
    shape = [B, S, lc.dims.hidden_size]
    return typed(lc.b.op("Add", residual, y, name=name), lc.params.dtype, shape)


def _times(lc: LayerContext, x: ir.Value, factor: float, name: str) -> ir.Value:
    if factor == 1.0:
        return x
    scalar = lc.b.const(np.asarray(factor, np.float32).astype(NUMPY_DTYPES[lc.params.dtype]), f"layers.{lc.i}.{name}")
    return lc.b.op("Mul", x, scalar, name=name)
