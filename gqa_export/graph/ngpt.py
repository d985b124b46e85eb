"""The nGPT layer's residuals (ArchSpec.ngpt, Dory; docs/coverage.md §16): Gemma-2's sandwich of norms
whose residual adds are interpolations on the unit sphere. The stream entering each block is the block's
normed input itself (DoryDecoderLayer replaces h by input_layernorm(h)), and the add is
h + |lambda x alpha_init / initializer_range| (norm(out) - h), a learned rate per hidden channel."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext

Norm = Callable[[LayerContext, ir.Value, "str | None", str], ir.Value]
Mlp = Callable[[LayerContext, ir.Value, ir.Value], ir.Value]


def interpolated_layer(lc: LayerContext, x: ir.Value, y: ir.Value, norm: Norm, mlp: Mlp) -> ir.Value:
    """The rest of the layer after attention: `x` the normed layer input, `y` the attention output (o_proj's)."""
    L, names = lc.spec.layer, lc.spec.ngpt
    assert names is not None
    y = norm(lc, y, L.post_attention_norm, "post_attention_layernorm")
    h = interpolate(lc, x, y, names.attention_rate, "residual_attn")
    x = norm(lc, h, L.pre_feedforward_norm, "pre_feedforward_layernorm")
    with lc.b.scope("mlp"):
        y = mlp(lc, x, h)
    y = norm(lc, y, L.post_feedforward_norm, "post_feedforward_layernorm")
    return interpolate(lc, x, y, names.mlp_rate, "residual_mlp")


def interpolate(lc: LayerContext, h: ir.Value, out: ir.Value, module: str, name: str) -> ir.Value:
    """h + rate (out - h), rate = |stored x alpha_init / initializer_range| per channel (float32 at export)."""
    assert lc.dims.ngpt is not None
    b, tensor, factor = lc.b, lc.name(module, suffix=""), np.float32(lc.dims.ngpt.attention_rate())
    rate = b.initializer(tensor, lc.params.derived(tensor, lambda v: np.abs(v * factor)))
    step = b.op("Mul", rate, b.op("Sub", out, h, name=f"{name}_step"), name=f"{name}_rate")
    return b.op("Add", h, step, name=name)
