"""The MLP activations a config names (`hidden_act`), as ONNX ops.

Apart from graph/blocks.py so that the expert paths (moe.py, per_layer.py, ...) and the MLP block
read one definition.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.model.dims import ModelDims
from gqa_export.model.moe import clamped_swiglu


class LayerContext(Protocol):
    """What an activation reads of graph/blocks.py's LayerContext (a Protocol: blocks imports this)."""

    b: GraphBuilder
    dims: ModelDims
    spec: ArchSpec
    params: Params

    def name(self, module: str, suffix: str = "weight") -> str: ...


def soft_cap(b: GraphBuilder, x: ir.Value, cap: ir.Value, name: str | None = None) -> ir.Value:
    """cap · tanh(x / cap): Gemma-2's attention scores and logits, a router's logits, xLSTM's gates. One
    definition, so that every cap reads the same three ops (`name` names the final Mul)."""
    return b.op("Mul", b.op("Tanh", b.op("Div", x, cap)), cap, name=name)


def softcapped_swiglu(lc: LayerContext, gate: ir.Value, up: ir.Value) -> ir.Value:
    """Inkling2's experts (MoeSpec activation "swiglu_softcapped"): softcap(gate, c_g) sigmoid(gate) softcap(up, c_u),
    the sigmoid seeing the raw gate (MoeDims.softcaps)."""
    b, moe = lc.b, lc.dims.moe
    assert moe is not None
    dtype = NUMPY_DTYPES[lc.params.dtype]
    gate_cap, up_cap = (
        b.const(np.asarray(c, dtype), f"{n}_softcap") for c, n in zip(moe.softcaps, ("gate", "up"), strict=True)
    )
    linear_gate = soft_cap(b, gate, gate_cap, "gate_capped")
    return b.op("Mul", b.op("Mul", linear_gate, b.op("Sigmoid", gate)), soft_cap(b, up, up_cap, "up_capped"))


def activation(lc: LayerContext, x: ir.Value) -> ir.Value:
    """The config's hidden activation: SiLU, the exact GELU, ReLU, the tanh-approximated GELU
    (gelu_pytorch_tanh, gelu_new; ONNX Gelu-20), squared ReLU (Nemotron) or xIELU (Apertus, its
    parameters per layer)."""
    b, act = lc.b, lc.dims.hidden_act
    if act == "gelu":  # the exact (erf) GELU: GPT-NeoX / Pythia, Falcon, MPT
        return b.op("Gelu", x)
    if act == "relu":  # OPT
        return b.op("Relu", x)
    if act == "silu":
        return b.op("Mul", x, b.op("Sigmoid", x), name="silu")
    if act == "relu2":
        relu = b.op("Relu", x)
        return b.op("Mul", relu, relu, name="relu2")
    if act == "xielu":
        return _xielu(lc, x)
    return b.op("Gelu", x, approximate="tanh")


def gated(lc: LayerContext, gate: ir.Value, up: ir.Value) -> ir.Value:
    """A gated MLP's act(gate) * up, or gpt-oss's clamped SwiGLU where the family's experts compute it
    (MiniMax-M3's dense MLPs and shared expert do too): gate clamped above at the limit, up within
    +-limit, gate * sigmoid(alpha * gate) * (up + 1); where the family's every SwiGLU clips as its
    routed experts' (MoeSpec.shared_clipped: DeepSeek-V4's shared expert, GLM-5-Next's dense MLPs too)
    act(min(gate, l)) * clip(up, -l, l)."""
    b, moe = lc.b, lc.dims.moe
    if lc.spec.moe is not None and lc.spec.moe.shared_clipped and moe is not None and moe.limit is not None:
        return clipped_swiglu(lc, gate, up, moe.limit)  # GLM-5-Next's dense MLPs clip as its experts do
    if not clamped_swiglu(lc.spec) or moe is None:
        return b.op("Mul", activation(lc, gate), up)
    dtype = NUMPY_DTYPES[lc.params.dtype]
    if moe.limit is not None:
        limit = b.const(np.asarray(moe.limit, dtype), "swiglu_limit")
        gate = b.op("Min", gate, limit, name="gate_clamped")
        up = b.op("Max", b.op("Min", up, limit), b.op("Neg", limit), name="up_clamped")
    alpha = b.const(np.asarray(moe.alpha, dtype), "swiglu_alpha")
    glu = b.op("Mul", gate, b.op("Sigmoid", b.op("Mul", gate, alpha)), name="glu")
    return b.op("Mul", b.op("Add", up, b.const(np.asarray(1.0, dtype), "one")), glu, name="clamped_swiglu")


def clipped_swiglu(lc: LayerContext, gate: ir.Value, up: ir.Value, limit: float) -> ir.Value:
    """act(min(gate, l)) * clip(up, -l, l): the routed experts' clip (the MoE op's) as plain ops."""
    b, dtype = lc.b, NUMPY_DTYPES[lc.params.dtype]
    high, low = b.const(np.asarray(limit, dtype), "limit_high"), b.const(np.asarray(-limit, dtype), "limit_low")
    gate = b.op("Min", gate, high, name="gate_clipped")
    return b.op("Mul", activation(lc, gate), b.op("Clip", up, low, high, name="up_clipped"), name="clipped_swiglu")


def _xielu(lc: LayerContext, x: ir.Value) -> ir.Value:
    """xIELU (transformers' XIELUActivation): ap = softplus(alpha_p), an = beta + softplus(alpha_n);
    x > 0: ap * x^2 + beta * x, else an * (expm1(min(x, eps)) - x) + beta * x. alpha_p / alpha_n are
    stored before the softplus; beta and eps are stored buffers."""
    b, params = lc.b, lc.params
    module = lc.spec.layer.act_params

    def stored(name: str) -> ir.Value:
        full = lc.name(f"{module}.{name}", "")
        return b.initializer(full, params.flat([full]))

    with b.scope("xielu"):
        beta, eps = stored("beta"), stored("eps")
        ap = b.op("Softplus", stored("alpha_p"))
        an = b.op("Add", beta, b.op("Softplus", stored("alpha_n")))
        linear_part = b.op("Mul", beta, x)
        positive = b.op("Add", b.op("Mul", ap, b.op("Mul", x, x)), linear_part)
        one = b.const(np.asarray(1, NUMPY_DTYPES[params.dtype]), "one")
        expm1 = b.op("Sub", b.op("Exp", b.op("Min", x, eps)), one)
        negative = b.op("Add", b.op("Mul", an, b.op("Sub", expm1, x)), linear_part)
        zero = b.const(np.asarray(0, NUMPY_DTYPES[params.dtype]), "zero")
        return b.op("Where", b.op("Greater", x, zero), positive, negative, name="xielu")
