"""(op, compute dtype, bits) of every node of a graph: what the EP table's kernels are checked against.

The compute dtype is the element type of the first input that carries it: GroupQueryAttention's
query, else its past key, else its cos cache (a quantized KV cache is int8/int4 and says nothing;
a graph read from disk has no types on intermediate values), MatMulNBits' scales (the same type as
its activations). "" where none is known. A GatherBlockQuantized carries its width and, when it
has a zero-point input, eps.ZERO_POINTS in the dtype slot (an EP may read 4-bit zero points in
another layout: docs/eps.md §2.7).
"""

from __future__ import annotations

from typing import Any

from gqa_export.eps import ZERO_POINTS

COMPUTE_INPUTS = {"GroupQueryAttention": (0, 3, 7), "MatMulNBits": (2,)}
BITS_OPS = ("MatMulNBits", "GatherBlockQuantized")
FLOATS = ("float", "float16", "bfloat16")


def ir_facts(model: Any) -> set[tuple[str, str, int]]:
    """The facts of an onnx_ir model, If/Loop bodies included."""
    import onnx_ir as ir

    facts = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        dtypes = [
            node.inputs[i].dtype.name.lower()  # type: ignore[union-attr]
            for i in COMPUTE_INPUTS.get(node.op_type, ())
            if i < len(node.inputs) and node.inputs[i] is not None and node.inputs[i].dtype is not None
        ]
        dtype = next((d for d in dtypes if d in FLOATS), "")
        bits = node.attributes["bits"].as_int() if node.op_type in BITS_OPS and "bits" in node.attributes else 0
        if node.op_type == "GatherBlockQuantized" and len(node.inputs) > 3 and node.inputs[3] is not None:
            dtype = ZERO_POINTS
        facts.add((node.op_type, dtype, bits))
    return facts
