"""Learned absolute position embeddings (GPT-2's wpe, OPT's embed_positions).

The table's row for each token's position is added to its embedding before the first layer. The
position is counted from attention_mask as HF generate counts it (cumsum(mask) - 1 over this step's
tokens): a right-padded row and its decode steps get the positions of the unpadded row, and a
decode step after the prompt gets the next position, whatever the KV buffer's size.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.dims import ModelDims
from gqa_export.graph.masks import token_positions
from gqa_export.graph.params import Params

B, S = "batch_size", "sequence_length"


def add_absolute_positions(
    b: GraphBuilder,
    h: ir.Value,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
) -> ir.Value:
    """h + table[position + offset] when the spec has a position table, else h unchanged.
    `input_ids` only lends its [B, S] shape (inputs_embeds does too)."""
    if spec.positions is None:
        return h
    name = spec.tensor(spec.positions.table)
    table = b.initializer(name, params.matrix(name))
    with b.scope("embed_positions"):
        positions = token_positions(b, input_ids, attention_mask)
        if spec.positions.offset:
            positions = b.op("Add", positions, b.const(spec.positions.offset, "offset", "int64"))
        rows = typed(b.op("Gather", table, positions), params.dtype, [B, S, dims.hidden_size])
        return typed(b.op("Add", h, rows, name="add_positions"), params.dtype, [B, S, dims.hidden_size])
