"""What a graph's initializers are, told by the op input each feeds (`inspect`'s weights row, check/reader.py)."""

from __future__ import annotations

import re

import onnx
from onnx import TensorProto, helper

_ROPE_TABLE = re.compile(r"(?:^|[._/])(?:cos|sin)_cache$")  # graph/rotary.py names them, as the official builder


def weight_census(g: onnx.GraphProto, inits: dict[str, TensorProto]) -> tuple[dict[str, str], int]:
    """The kinds of weight a graph stores (linear, embedding, experts, norm, bias, lora: their dtypes or
    quantized forms) and its parameter count, read from which op input each initializer feeds."""
    kinds: dict[str, set[str]] = {}
    params = 0
    for node in g.node:
        for pos, name in enumerate(node.input):
            t = inits.get(name)
            if t is None:
                continue
            dtype = TensorProto.DataType.Name(t.data_type).lower()
            count = 1
            for d in t.dims:
                count *= d
            if node.op_type in ("MoE", "QMoE") and pos in (2, 4):
                bits = next(
                    (helper.get_attribute_value(x) for x in node.attribute if x.name == "expert_weight_bits"), 4
                )
                quantized = node.op_type == "QMoE"
                kinds.setdefault("experts", set()).add(f"int{bits}" if quantized else dtype)
                params += count * 8 // bits if quantized else count
            elif (node.op_type, pos) in (("MatMulNBits", 1), ("GatherBlockQuantized", 0)):
                a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
                bits = a.get("bits", 4)
                kind = "linear" if node.op_type == "MatMulNBits" else "embedding"
                kinds.setdefault(kind, set()).add(f"int{bits} (block {a.get('block_size', '?')})")
                params += count * 8 // bits
            elif node.op_type == "Gather" and pos == 0 and _ROPE_TABLE.search(name):
                continue  # RoPE's cos/sin tables read per position (RoPE outside GQA): constants, not weights
            elif (pos == 0 and node.op_type == "Gather") or (
                node.op_type == "Gemm" and pos == 1 and name in _gather_tables(g)
            ):
                kinds.setdefault("embedding", set()).add(dtype)
                params += count
            elif node.op_type == "MatMul" and ".lora_" in name:  # a LoRA input's empty default (docs/lora.md)
                kinds.setdefault("lora", set()).add(dtype)
            elif node.op_type in ("MatMul", "Gemm") and pos == 1:
                kinds.setdefault("linear", set()).add(dtype)
                params += count
            elif "LayerNormalization" in node.op_type and pos in (1, 2):
                kinds.setdefault("norm", set()).add(dtype)
                params += count
            elif node.op_type == "Add" and len(t.dims) == 1:
                kinds.setdefault("bias", set()).add(dtype)
                params += count
    return {k: ", ".join(sorted(v)) for k, v in kinds.items()}, params


def _gather_tables(g: onnx.GraphProto) -> set[str]:
    return {n.input[0] for n in g.node if n.op_type == "Gather"}
