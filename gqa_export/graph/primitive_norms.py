"""RMSNorm as primitive ops, for EPs whose op list has no SimplifiedLayerNormalization (TensorRT-RTX:
its ONNX parser imports no such op, docs/eps.md §2.8).

Each SimplifiedLayerNormalization(x, w, axis, epsilon) becomes, as the official builder's TRT-RTX
expansion writes it:

    x -> Cast(fp32) -> Pow 2 -> ReduceMean(axes) -> Add eps -> Sqrt -> Div(1, .) -> Mul(x fp32)
      -> Cast(the weight's dtype) -> Mul w

The statistics are fp32 whatever the activations (the contrib op's stash_type=1), and the weight
is applied after the cast back, HF's LlamaRMSNorm order. Only values change places; no weight
byte is read, so it runs after the optimizer and before quantization like any graph form.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.eps import ExecutionProvider
from gqa_export.graph.params import WIDER_THAN_IO_META

NORM = "SimplifiedLayerNormalization"
PREFIX = "/primitive_norms"


def decompose_norms(model: ir.Model) -> int:
    """Replace every SimplifiedLayerNormalization of `model` (subgraphs included) in place; returns
    how many."""
    count = 0
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if node.op_type == NORM and node.domain in ("", "ai.onnx"):
            _decompose(node, model.graph)
            count += 1
    return count


def _constant(root: ir.Graph, name: str, value: np.ndarray) -> ir.Value:
    """A small initializer of the main graph, shared by every norm that needs the same value."""
    existing = root.initializers.get(name)
    if existing is not None:
        return existing
    tensor = ir.Tensor(value, name=name)
    result = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=tensor.shape, const_value=tensor)
    result.meta[WIDER_THAN_IO_META] = True  # fp32 statistics in a 16-bit graph, by design
    root.register_initializer(result)
    return result


def _decompose(node: ir.Node, root: ir.Graph) -> None:
    x, weight = node.inputs[0], node.inputs[1]
    assert x is not None and weight is not None, f"{node.name}: a norm without input or weight"
    assert len(node.inputs) == 2, f"{node.name}: a norm with a bias input is not an RMSNorm"
    assert all(not out.uses() for out in node.outputs[1:]), f"{node.name}: its statistics outputs are read"
    axis = node.attributes.get_int("axis", -1)
    epsilon = node.attributes.get_float("epsilon", 1e-5)
    dtype = weight.dtype if weight.dtype is not None else x.dtype
    assert dtype is not None, f"{node.name}: no dtype to cast the normalized values back to"
    if axis < 0:
        axes = list(range(axis, 0))
    else:
        rank = x.shape.rank() if x.shape is not None else None
        assert rank is not None, f"{node.name}: a positive axis needs the input's rank"
        axes = list(range(axis, rank))
    graph = node.graph
    assert graph is not None
    name = node.name or "norm"
    constants = {
        "two": _constant(root, f"{PREFIX}/two", np.array(2.0, np.float32)),
        "one": _constant(root, f"{PREFIX}/one", np.array(1.0, np.float32)),
        "eps": _constant(root, f"{PREFIX}/epsilon_{epsilon!r}", np.array(epsilon, np.float32)),
        "axes": _constant(root, f"{PREFIX}/axes_{'_'.join(map(str, axes))}", np.array(axes, np.int64)),
    }
    nodes: list[ir.Node] = []

    def add(op: str, *inputs: ir.Value, **attributes: int) -> ir.Value:
        created = ir.Node(
            "", op, list(inputs), attributes=ir.convenience.convert_attributes(attributes),
            name=f"{name}/{op}_{len(nodes)}", num_outputs=1,
        )  # fmt: skip
        nodes.append(created)
        return created.outputs[0]

    wide = dtype != ir.DataType.FLOAT
    x32 = add("Cast", x, to=ir.DataType.FLOAT.value) if wide else x
    mean = add("ReduceMean", add("Pow", x32, constants["two"]), constants["axes"], keepdims=1)
    inverse = add("Div", constants["one"], add("Sqrt", add("Add", mean, constants["eps"])))
    normalized = add("Mul", x32, inverse)
    back = add("Cast", normalized, to=dtype.value) if wide else normalized
    result = add("Mul", back, weight)
    graph.insert_after(node, nodes)
    old = node.outputs[0]
    result.name, old.name = old.name, f"{old.name}_contrib"
    result.type, result.shape = old.type, old.shape
    ir.convenience.replace_all_uses_with(old, result, replace_graph_outputs=True)
    graph.remove(node, safe=True)


def decompose_for(ep: ExecutionProvider, models: list[ir.Model]) -> int:
    """Decompose the norms of `models` when `ep` has no SimplifiedLayerNormalization kernel."""
    return sum(decompose_norms(model) for model in models) if ep.lacks(NORM) else 0
