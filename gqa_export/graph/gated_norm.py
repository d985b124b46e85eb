"""A norm with a low-rank input-dependent sigmoid gate (A.X-K2's GatedRMSNorm, Megatron's GatedNormWrapper).

    y = RMSNorm(x)                      the inner norm "{norm}.{inner}", at rms_norm_eps
    out = y * sigmoid(up(silu(down(y))))  down [rank, H], up [H, rank], no biases

The spec names the three modules relative to the norm (LayerNames.gated_norms); a layer whose norm the
checkpoint stores plain (A.X-K2's dense layers' post_attention_layernorm) reads it plain. HF takes the
gate's sigmoid in fp32 and casts the product back: the same in an fp32 package (docs/coverage.md).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import GraphBuilder


def is_gated(lc: LayerContext, module: str) -> bool:
    """Whether the checkpoint holds `module` as a gated norm (its inner norm's weight) for the spec."""
    names = lc.spec.layer.gated_norms
    return names is not None and lc.has(f"{module}.{names[0]}")


def gated_norm(lc: LayerContext, x: ir.Value, module: str, name: str) -> ir.Value:
    """`module`'s gated norm of x [B,S,H]: the RMSNorm times the sigmoid of its rank-r gate MLP."""
    assert lc.spec.layer.gated_norms is not None
    inner, down, up = (f"{module}.{part}" for part in lc.spec.layer.gated_norms)
    b, hidden = lc.b, lc.dims.hidden_size
    y = normalize(b, x, lc.name(inner), lc.params, lc.dims, name, hidden)
    h = linear(lc, y, [down], None, f"{name}_gate_down")
    h = silu(b, h, f"{name}_gate_silu")
    gate = b.op("Sigmoid", linear(lc, h, [up], None, f"{name}_gate_up"))
    return b.op("Mul", y, gate, name=f"{name}_gated")


def silu(b: GraphBuilder, x: ir.Value, name: str) -> ir.Value:
    """x * sigmoid(x): the gate MLP's activation (CLIPMLP's, set to SiLU by A.X-K2)."""
    return b.op("Mul", x, b.op("Sigmoid", x), name=name)
