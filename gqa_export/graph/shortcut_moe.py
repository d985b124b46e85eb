"""LongCat-Flash's shortcut-connected MoE (spec MoeSpec.shortcut, ArchSpec.sublayers 2).

transformers' LongcatFlashDecoderLayer holds two attention + dense-MLP sublayers and one sparse
block. With r the layer input:
    h1 = r + attn0(norm_in0(r));  x = norm_post0(h1);  m = moe(x);  h2 = h1 + mlp0(x)
    h3 = h2 + attn1(norm_in1(h2));  out = (h3 + mlp1(norm_post1(h3))) + m
The graph runs each sublayer as an ordinary pre-norm layer (graph layers 2i and 2i + 1, each with
its own KV cache, as HF's cache has 2 * num_layers entries); the first computes the sparse block
on its post-attention normed input beside its dense MLP, and the block's output waits in
`LayerContext.shortcut` until the second sublayer's residual is complete, then is added.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import typed
from gqa_export.graph.mlp import mlp_block
from gqa_export.graph.moe import sparse_mlp

B, S = "batch_size", "sequence_length"


def shortcut_mlp(lc: LayerContext, x: ir.Value) -> ir.Value:
    """The sublayer's dense MLP on x; the sparse block on the same x is kept for the pair's last sublayer."""
    assert lc.shortcut is not None and lc.layer.sparse
    with lc.b.scope("shortcut_moe"):
        lc.shortcut[lc.i + lc.spec.sublayers - 1] = sparse_mlp(lc, x)
    return mlp_block(lc, x)


def add_shortcut(lc: LayerContext, h: ir.Value) -> ir.Value:
    """h plus the pair's sparse output when this is the sublayer that adds it (after its MLP residual)."""
    pending = lc.shortcut.pop(lc.i, None) if lc.shortcut is not None else None
    if pending is None:
        return h
    shape = [B, S, lc.dims.hidden_size]
    return typed(lc.b.op("Add", h, pending, name="residual_shortcut_moe"), lc.params.dtype, shape)
