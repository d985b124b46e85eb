"""Learned absolute position embeddings (GPT-2's wpe, OPT's embed_positions), and the queries'
position-dependent scales (Ministral-3's llama-4 scaling, Llama-4's attention temperature tuning).

The table's row for each token's position is added to its embedding before the first layer. The
position is counted from attention_mask as HF generate counts it (cumsum(mask) - 1 over this step's
tokens): a right-padded row and its decode steps get the positions of the unpadded row, and a
decode step after the prompt gets the next position, whatever the KV buffer's size.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.masks import token_positions
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.model.dims import ModelDims

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


def position_query_scale(
    b: GraphBuilder,
    scale: tuple[float, int] | None,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dtype: ir.DataType,
    offset: int = 0,
    scope: str = "query_scale",
) -> ir.Value | None:
    """[B,S,1]: 1 + beta * log(1 + floor((pos + offset) / length)) for this step's tokens
    (Ministral-3's llama-4 attention scale; Llama-4's temperature tuning counts from 1), pos =
    cumsum(attention_mask) - 1 as HF generate's position_ids (its cache positions for right padding)."""
    if scale is None:
        return None
    beta, length = scale
    with b.scope(scope):
        positions = token_positions(b, input_ids, attention_mask)
        if offset:
            positions = b.op("Add", positions, b.const(offset, "offset", "int64"))
        # in the graph's dtype: a float32 constant would be the one float32 initializer of an fp16 graph
        blocks = b.op("Cast", b.op("Div", positions, b.const(length, "length", "int64")), to=dtype)
        one = b.const(np.asarray(1.0, np.float32).astype(NUMPY_DTYPES[dtype]), "one")
        beta_value = b.const(np.asarray(beta, np.float32).astype(NUMPY_DTYPES[dtype]), "beta")
        factor = b.op("Add", one, b.op("Mul", beta_value, b.op("Log", b.op("Add", one, blocks))))
        return b.op("Unsqueeze", factor, b.const([-1], "last", "int64"))
