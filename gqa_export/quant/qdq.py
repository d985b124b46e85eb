"""int4 as QDQ for EPs without MatMulNBits (TensorRT-RTX; docs/eps.md §2.6).

Each 4-bit MatMulNBits becomes DequantizeLinear (opset 21, blocked along K) of a uint4 [K, N]
weight with [K/bs, N] scales and uint4 zero points, feeding a plain MatMul. The quantized values
are the MatMulNBits ones, unpacked (low nibble = lower K index) and transposed, so both forms
compute the same dequantized weight; a symmetric build's implicit zero point 8 is written out.
Tensors stay lazy: each is unpacked when the writer streams it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir


def to_qdq(model: ir.Model) -> int:
    """Rewrite every 4-bit MatMulNBits of `model` in place; returns how many."""
    graph, count = model.graph, 0
    for node in list(graph):
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
            continue
        k, n = node.attributes["K"].as_int(), node.attributes["N"].as_int()
        bs, bits = node.attributes["block_size"].as_int(), node.attributes["bits"].as_int()
        if bits != 4 or (len(node.inputs) > 4 and any(v is not None for v in node.inputs[4:])):
            continue  # int8 / g_idx / bias: left for the EP lint to refuse
        packed, scales = node.inputs[1], node.inputs[2]
        zp = node.inputs[3] if len(node.inputs) > 3 else None
        blocks = -(-k // bs)
        base = (packed.name or "w").removesuffix(".qweight")

        def weight(packed: ir.Value = packed, k: int = k, n: int = n) -> ir.TensorProtocol:
            return ir.Tensor(
                np.ascontiguousarray(_nibbles(packed.const_value.numpy(), n)[:, :k].T).astype(ml_dtypes.uint4)
            )

        def scale_t(scales: ir.Value = scales) -> ir.TensorProtocol:
            return ir.Tensor(np.ascontiguousarray(scales.const_value.numpy().T))

        def zero_t(zp: ir.Value | None = zp, n: int = n, blocks: int = blocks) -> ir.TensorProtocol:
            z = (
                _nibbles(zp.const_value.numpy(), n)[:, :blocks].T
                if zp is not None
                else np.full((blocks, n), 8, np.uint8)
            )
            return ir.Tensor(np.ascontiguousarray(z).astype(ml_dtypes.uint4))

        inputs = [
            _initializer(
                graph, f"{base}.qdq_weight", ir.LazyTensor(weight, dtype=ir.DataType.UINT4, shape=ir.Shape([k, n]))
            ),
            _initializer(
                graph, f"{base}.qdq_scales", ir.LazyTensor(scale_t, dtype=scales.dtype, shape=ir.Shape([blocks, n]))
            ),
            _initializer(
                graph,
                f"{base}.qdq_zero_points",
                ir.LazyTensor(zero_t, dtype=ir.DataType.UINT4, shape=ir.Shape([blocks, n])),
            ),
        ]
        dq = ir.Node(
            "",
            "DequantizeLinear",
            inputs,
            attributes=[ir.AttrInt64("axis", 0), ir.AttrInt64("block_size", bs)],
            name=f"{node.name}/DequantizeLinear",
            num_outputs=1,
        )
        matmul = ir.Node("", "MatMul", [node.inputs[0], dq.outputs[0]], name=f"{node.name}/MatMul", num_outputs=1)
        graph.insert_after(node, [dq, matmul])
        old, new = node.outputs[0], matmul.outputs[0]
        new.type, new.shape = old.type, old.shape
        old_name = old.name
        old.name = f"{old_name}_nbits"
        new.name = old_name
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        count += 1
    for name in [name for name, v in graph.initializers.items() if not v.uses() and not v.is_graph_input()]:
        graph.initializers.pop(name)
    return count


def _nibbles(packed: np.ndarray, rows: int) -> np.ndarray:
    """uint8 bytes, two 4-bit values each (low nibble first), as one value per column: [rows, 2·bytes]."""
    flat = packed.reshape(rows, -1)
    return np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(rows, -1)


def _initializer(graph: ir.Graph, name: str, tensor: ir.TensorProtocol) -> ir.Value:
    value = ir.Value(name=name, const_value=tensor, type=ir.TensorType(tensor.dtype), shape=tensor.shape)
    graph.register_initializer(value)
    return value
