"""The decoder's input embedding: the token table (or the runtime's inputs_embeds), the embedding
multiplier, special-id ranges with their own embedders, learned absolute positions, an embedding
LayerNorm, and the per-layer inputs computed from the same ids (graph/decoder.py builds the rest)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.blocks import normalize
from gqa_export.graph.builder import GraphBuilder, float_scalar, typed
from gqa_export.graph.hard_tokens import embed_hard_tokens
from gqa_export.graph.params import Params
from gqa_export.graph.per_layer import per_layer_inputs
from gqa_export.graph.positions import add_absolute_positions
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"


def embed_input(
    b: GraphBuilder,
    embeds: ir.Value | None,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
    io_dtype: ir.DataType,
) -> tuple[ir.Value, ir.Value | None, ir.Value | None]:
    """(hidden states [B, S, H], the token table when the graph gathers from it (a tied lm_head
    reads it too), the per-layer inputs or None)."""
    hidden = [B, S, dims.hidden_size]
    embed = None
    if embeds is not None:  # what HF's forward(inputs_embeds=...) takes (transformers 5.x)
        # per-layer embeddings read the ids with placeholders as pad, as HF's multimodal model does
        ids = placeholders_as_pad(b, input_ids, dims) if dims.per_layer_input_size else input_ids
        h = embeds
        if dims.embedding_multiplier != 1.0 and not dims.embedding_scaled_in_table:
            h = typed(b.op("Mul", h, float_scalar(b, dims.embedding_multiplier, params.dtype)), io_dtype, hidden)
    else:
        embed = b.initializer(spec.tensor(spec.embed), params.matrix(spec.tensor(spec.embed)))
        with b.scope("embed_tokens"):
            ids = placeholders_as_pad(b, input_ids, dims)
            h = typed(b.op("Gather", embed, ids), io_dtype, hidden)
            if dims.embedding_multiplier != 1.0:
                h = typed(b.op("Mul", h, float_scalar(b, dims.embedding_multiplier, params.dtype)), io_dtype, hidden)
            h = embed_hard_tokens(b, input_ids, h, dims, spec, params)  # ranges with their own embedders
            if spec.embedding_table_norm:  # Muse-Glimmer: a weightless RMSNorm in the table's module
                h = normalize(b, h, "", params, dims, "embed_norm", dims.hidden_size, kind="rms_free")
    h = add_absolute_positions(b, h, input_ids, attention_mask, dims, spec, params, embeds is not None)
    if spec.embedding_norm:  # Bloom: a LayerNorm of the embeddings (inputs_embeds too)
        h = normalize(b, h, spec.tensor(spec.embedding_norm), params, dims, "embedding_norm", dims.hidden_size)
    per_layer = per_layer_inputs(b, ids, h, dims, spec, params) if dims.per_layer_input_size else None
    return h, embed, per_layer


def placeholders_as_pad(b: GraphBuilder, input_ids: ir.Value, dims: ModelDims) -> ir.Value:
    """Gemma-4's multimodal classes embed image/video/audio placeholders as pad_token_id when no
    pixels replace them (modeling_gemma4.py, Gemma4Model.forward), Kimi-K2.5's as id 0
    (dims.placeholder_row); a text-only package does the same."""
    if not dims.placeholder_ids or dims.placeholder_row is None:
        return input_ids
    pad = b.const(dims.placeholder_row, "pad_id", "int64")
    ids = input_ids
    for token in dims.placeholder_ids:
        ids = b.op("Where", b.op("Equal", ids, b.const(token, f"placeholder{token}", "int64")), pad, ids)
    return ids
