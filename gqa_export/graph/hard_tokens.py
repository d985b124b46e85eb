"""Special ids embedded by their own small tables (docs/gemma3n.md §1.2).

A multimodal checkpoint may reserve id ranges of its text vocabulary (Gemma-3n: the vision and
audio control tokens) that its model embeds through a sub-model's embedder instead of the text
table: `post_norm(projection(norm(table[id - offset])))`, `norm` an RMSNorm with its stored
weight, `post_norm` one without weight, both with the sub-config's eps. The text-only package does
the same, so those ids (prompted or generated) embed as HF embeds them."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.model.dims import ModelDims


def embed_hard_tokens(
    b: GraphBuilder, ids: ir.Value, h: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params
) -> ir.Value:
    """h with the rows of ids in each hard-token range replaced by that range's embedding."""
    root = spec.prefix.removesuffix("language_model.")  # the embedders sit beside the text decoder
    for rng in dims.hard_tokens:
        names = rng.names
        with b.scope(f"hard_tokens.{names.module}"):
            low = b.const(rng.offset, "offset", "int64")
            inside = b.op("And", b.op("GreaterOrEqual", ids, low),
                          b.op("Less", ids, b.const(rng.offset + rng.size, "end", "int64")))  # fmt: skip
            local = b.op("Where", inside, b.op("Sub", ids, low), b.const(0, "row0", "int64"))
            table = f"{root}{names.module}.{names.table}"
            e = b.op("Gather", b.initializer(table, params.matrix(table)), local)
            norm = f"{root}{names.module}.{names.norm}"
            e = b.op("SimplifiedLayerNormalization", e, b.initializer(norm, params.vector([norm])), axis=-1,
                     epsilon=rng.eps, stash_type=1, name="norm")  # fmt: skip
            projection = f"{root}{names.module}.{names.projection}"
            e = b.op("MatMul", e, b.initializer(projection, params.matmul_weight([projection])))
            ones = b.const(np.ones(dims.hidden_size, NUMPY_DTYPES[params.dtype]), "unit_weight")
            e = b.op("SimplifiedLayerNormalization", e, ones, axis=-1, epsilon=rng.eps, stash_type=1, name="post_norm")
            mask = b.op("Unsqueeze", inside, b.const([-1], "last_axis", "int64"))
            h = b.op("Where", mask, e, h, name="embedded")
    return h
