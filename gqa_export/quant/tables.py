"""Which embedding tables an int4/int8 build quantizes, and which an EP reads through a float Gather.

Like the official builder, a table tied to the lm_head is quantized (one copy: the lm_head's
MatMulNBits blobs, read by GatherBlockQuantized), and so is a table the graph marks
(graph/params.QUANTIZE_TABLE_META: per-layer inputs); an untied one stays float unless
--quant-embeddings asks. An EP without a GatherBlockQuantized kernel for those tables (QNN,
TensorRT-RTX, DirectML, OpenVINO; WebGPU for 4-bit zero points) keeps the Gather on the float table
instead, while the tied lm_head is quantized as usual, in the EP's own int4 form (docs/eps.md §2.7).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.eps import ExecutionProvider
from gqa_export.graph.params import QUANTIZE_TABLE_META
from gqa_export.quant.nbits import NBitsConfig


def float_gather(ep: ExecutionProvider, nbits: NBitsConfig) -> str:
    """Why `ep` reads the tables quantized by default through a float Gather ("": it runs the
    GatherBlockQuantized that quant/quantize.py writes): no kernel, or none for 4-bit zero points one
    a byte, the layout written here."""
    if ep.lacks("GatherBlockQuantized"):
        return f"GatherBlockQuantized has no {ep.name} kernel"
    if nbits.bits == 4 and not nbits.symmetric and not ep.gather_zero_points_4bit:
        return f"{ep.name}'s GatherBlockQuantized reads 4-bit zero points packed two a byte"
    return ""


def quantized_table(node: ir.Node, quantize_embeddings: bool, float_gather: str) -> ir.Value | None:
    """The table of Gather(E[V, K], ids) when it becomes GatherBlockQuantized (any K: a partial last
    block is padded and the gathered rows are cut back to K); None when it stays float."""
    table = _table(node)
    if table is None:
        return None
    if quantize_embeddings:  # asked for: GatherBlockQuantized, which the EP lint checks
        return table
    tied = any(use.node.op_type == "Gemm" for use in table.uses())
    if not (tied or table.meta.get(QUANTIZE_TABLE_META)) or float_gather:
        return None
    return table


def kept_float_table(node: ir.Node, quantize_embeddings: bool, float_gather: str) -> bool:
    """A table Gather that stays float only because of `float_gather`."""
    return bool(float_gather) and quantized_table(node, quantize_embeddings, "") is not None


def _table(node: ir.Node) -> ir.Value | None:
    """E of Gather(E[V, K], ids, axis=0) with a constant float table."""
    if node.op_type != "Gather" or node.domain != "" or node.attributes.get_int("axis", 0) != 0:
        return None
    table = node.inputs[0]
    if table is None or table.const_value is None or len(table.const_value.shape) != 2:
        return None
    return table if table.const_value.dtype.is_floating_point() else None
