"""Inkling2-Loop's message gates (graph/loop_messages.py makes the messages): a later loop pass's layer mixes each of
its query, key, value and MLP inputs with the previous pass's message for it through a low-rank tanh gate, in float32
as transformers' Inkling2LoopMessageGate computes it (its projections kept in float32 there)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.relative_bias_spec import LoopMessageNames
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.params import WIDER_THAN_IO_META, Params


def message_gate(lc: LayerContext, names: LoopMessageNames, x: ir.Value, message: ir.Value, which: int) -> ir.Value:
    """(1 - tanh(F g)) x + tanh(M g) message with g = D [rms(x) | rms(message)] (weightless RMSNorms, the
    config's eps), in float32 as transformers computes it; the graph's dtype again after."""
    b, wide, hidden = lc.b, Params(lc.params.store, ir.DataType.FLOAT), lc.dims.hidden_size
    prefix = names.gates[which]
    with b.scope(prefix):
        cast = lc.params.dtype != ir.DataType.FLOAT
        x32, m32 = (b.op("Cast", v, to=ir.DataType.FLOAT) for v in (x, message)) if cast else (x, message)
        ones = b.const(np.ones(hidden, "float32"), "unit_weight")
        eps = float(lc.dims.rms_eps)
        normed = [
            b.op("SimplifiedLayerNormalization", v, ones, axis=-1, epsilon=eps, stash_type=1, name=n)
            for v, n in ((x32, "input_norm"), (m32, "message_norm"))
        ]
        joined = b.op("Concat", *normed, axis=-1, name="joined")
        weights = []
        for module in (names.down, names.forget, names.message):
            name = lc.name(f"{prefix}.{module}")
            weights.append(b.initializer(name, wide.matmul_weight([name])))
        for value in (ones, *weights):
            value.meta[WIDER_THAN_IO_META] = True
        low = b.op("MatMul", joined, weights[0], name="down_proj")
        forget = b.op("Tanh", b.op("MatMul", low, weights[1], name="forget_proj"))
        keep = b.op("Sub", b.const(np.asarray(1.0, "float32"), "one"), forget, name="keep")
        passed = b.op("Mul", b.op("Tanh", b.op("MatMul", low, weights[2], name="message_proj")), m32)
        out = b.op("Add", b.op("Mul", keep, x32), passed, name="gated")
        return b.op("Cast", out, to=lc.params.dtype) if cast else out
