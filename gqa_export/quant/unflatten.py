"""Drop the flatten / unflatten Reshapes around a quantized tied lm_head.

A tied lm_head is built as Gemm(Reshape(x, [-1, H]), E, transB=1) and reshaped back to [B, S, V]
(graph/outputs.py): Gemm is 2-D only, and reading the embedding table E itself keeps a transposed
copy out of the file and the session. Once quantization has made that Gemm a MatMulNBits, which
takes an input of any rank, both Reshapes are dead weight, and the second is not free: it writes
the `logits` graph output, which onnxruntime fills by copying the whole [B, S, V] tensor (1 GB at
2048 tokens and a 128k vocabulary; 10.3 s of a 55 s prompt in the profile of issue #40,
benchmarks/results/speed_vs_builder.md). Feeding x straight in gives the same numbers without the
copy.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass


def unflatten_matmul_nbits(model: ir.Model) -> int:
    """MatMulNBits(Reshape(x, [-1, K])) -> Reshape(., Concat(Shape(x)[:-1], [N])) becomes
    MatMulNBits(x) wherever the graph has that shape; returns how many were rewritten."""
    graph, done = model.graph, 0
    for node in list(graph):
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
            continue
        x = _flattened_input(node)
        after = _unflattening_reshape(node, x) if x is not None else None
        if x is None or after is None:
            continue
        node.replace_input_with(0, x)
        old, new = after.outputs[0], node.outputs[0]
        new.name, old.name = old.name, f"{old.name}_flat"
        new.type, new.shape = old.type, old.shape
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        done += 1
    if done:
        RemoveUnusedNodesPass()(model)
    return done


def _flattened_input(node: ir.Node) -> ir.Value | None:
    """x where the node reads Reshape(x, [-1, K]) and nothing else reads that reshape."""
    a = node.inputs[0]
    prod = a.producer() if a is not None else None
    if prod is None or prod.op_type != "Reshape" or prod.domain != "" or len(a.uses()) != 1:
        return None
    shape = prod.inputs[1]
    k = node.attributes.get_int("K", 0)
    if shape is None or shape.const_value is None or shape.const_value.numpy().tolist() != [-1, k]:
        return None
    return prod.inputs[0]


def _unflattening_reshape(node: ir.Node, x: ir.Value) -> ir.Node | None:
    """The only reader of the node's output when it is Reshape(y, Concat(Shape(x, end=-1 or
    rank - 1), [N])): x's leading dims with N last, what MatMulNBits(x) gives by itself."""
    uses = node.outputs[0].uses()
    if len(uses) != 1 or uses[0].idx != 0:
        return None
    after = uses[0].node
    if after.op_type != "Reshape" or after.domain != "":
        return None
    concat = after.inputs[1].producer() if after.inputs[1] is not None else None
    if concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2:
        return None
    lead, last = concat.inputs
    shape_node = lead.producer() if lead is not None else None
    n = node.attributes.get_int("N", 0)
    if (
        shape_node is None
        or shape_node.op_type != "Shape"
        or shape_node.inputs[0] is not x
        or last is None
        or last.const_value is None
        or last.const_value.numpy().tolist() != [n]
    ):
        return None
    # x's rank must be end + 1. Intermediate values carry no shapes in these graphs (none are
    # written to the file), so an unknown rank is taken from the builder's contract instead: the
    # tied head of graph/outputs.py (scope "lm_head") always reads [B, S, H] and keeps 2 dims.
    rank = len(x.shape) if x.shape is not None else (3 if "/lm_head/" in (after.name or "") else None)
    start = shape_node.attributes.get_int("start", 0)
    end = shape_node.attributes.get_int("end", rank or 0)
    if rank is None or start != 0 or end not in (-1, rank - 1):
        return None
    return after
