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


class LayerContext(Protocol):
    """What an activation reads of graph/blocks.py's LayerContext (a Protocol: blocks imports this)."""

    b: GraphBuilder
    dims: ModelDims
    spec: ArchSpec
    params: Params

    def name(self, module: str, suffix: str = "weight") -> str: ...


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
