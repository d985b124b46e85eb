"""Per-token absmax activation quantization in front of an imported MatMulNBits (docs/prequantized.md §3.10).

BitNet's Linear layers quantize their input before the ternary product: per token (the last axis),
s = qmax / max(max|x|, 1e-5), x -> clamp(round(x · s), qmin, qmax) / s, with qmax = 2^(b-1) - 1 and
qmin = -2^(b-1) (b = 8). The checkpoint means that function, so a package that fed MatMulNBits the
float activations would compute another model. The nodes here compute it in fp32 (a 16-bit graph
casts in and out: the rounded values are integers over s, which the io dtype then rounds once) and
hand MatMulNBits the fake-quantized activations, so its output needs no rescaling and stays in the
activations' range. ONNX Round rounds half to even, as torch.round does.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.params import WIDER_THAN_IO_META

FLOOR = 1e-5  # transformers' clamp of the absmax


def _constant(graph: ir.Graph, name: str, value: np.ndarray) -> ir.Value:
    existing = graph.initializers.get(name)
    if existing is not None:
        return existing
    tensor = ir.Tensor(value, name=name)
    const = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(tensor.shape), const_value=tensor)
    const.meta[WIDER_THAN_IO_META] = True  # fp32 arithmetic in a 16-bit graph, by design
    graph.register_initializer(const)
    return const


def absmax_per_token(
    graph: ir.Graph, x: ir.Value, bits: int, io_dtype: ir.DataType, name: str
) -> tuple[list[ir.Node], ir.Value]:
    """The nodes that quantize x [..., K] per token to int<bits> absmax and back, and their output."""
    qmax, qmin = float(2 ** (bits - 1) - 1), float(-(2 ** (bits - 1)))
    prefix = f"activation_int{bits}"
    top = _constant(graph, f"{prefix}.qmax", np.asarray(qmax, np.float32))
    low = _constant(graph, f"{prefix}.qmin", np.asarray(qmin, np.float32))
    floor = _constant(graph, f"{prefix}.absmax_floor", np.asarray(FLOOR, np.float32))
    last = _constant(graph, f"{prefix}.last_axis", np.asarray([-1], np.int64))
    nodes: list[ir.Node] = []

    def op(op_type: str, *inputs: ir.Value, **attrs: object) -> ir.Value:
        attributes = ir.convenience.convert_attributes(attrs) if attrs else []
        node = ir.Node("", op_type, list(inputs), attributes=attributes, name=f"{name}/{op_type}_{len(nodes)}")
        nodes.append(node)
        return node.outputs[0]

    x32 = x if io_dtype == ir.DataType.FLOAT else op("Cast", x, to=ir.DataType.FLOAT)
    peak = op("Max", op("ReduceMax", op("Abs", x32), last, keepdims=1), floor)
    scale = op("Div", top, peak)
    codes = op("Clip", op("Round", op("Mul", x32, scale)), low, top)
    out = op("Div", codes, scale)
    return nodes, out if io_dtype == ir.DataType.FLOAT else op("Cast", out, to=io_dtype)
