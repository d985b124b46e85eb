"""(op, compute dtype, bits) of every node of a graph: what the EP table's kernels are checked against.

The compute dtype is the element type of the input that carries it: GroupQueryAttention's past key
(the KV dtype is the attention dtype), MatMulNBits' scales (the same type as its activations).
"""

from __future__ import annotations

from typing import Any

COMPUTE_INPUT = {"GroupQueryAttention": 3, "MatMulNBits": 2}


def ir_facts(model: Any) -> set[tuple[str, str, int]]:
    """The facts of an onnx_ir model, If/Loop bodies included."""
    import onnx_ir as ir

    facts = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        index = COMPUTE_INPUT.get(node.op_type)
        value = node.inputs[index] if index is not None and index < len(node.inputs) else None
        dtype = value.dtype.name.lower() if value is not None and value.dtype is not None else ""
        bits = node.attributes["bits"].as_int() if node.op_type == "MatMulNBits" and "bits" in node.attributes else 0
        facts.add((node.op_type, dtype, bits))
    return facts
