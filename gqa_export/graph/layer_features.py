"""Features added to the outputs of the first decoder layers, carried in a widened inputs_embeds
(docs/multimodal.md §11.5).

onnxruntime-genai 0.18 feeds a multimodal decoder one `inputs_embeds` buffer whose width it takes
from genai_config's `decoder.hidden_size`, and the embedding model writes it. A model that adds a
second set of image features to the hidden states after each of its first k layers (Qwen3-VL's
deepstack) therefore gets them as k more hidden-wide slices of that buffer: `[B, S, H·(1 + k)]`,
slice 0 the embeddings, slice j (j ≥ 1) what HF adds after layer j - 1 (zeros where no image
feature is, so the add is exact there: x + 0 = x).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder, typed

B, S = "batch_size", "sequence_length"


def split_layer_features(
    b: GraphBuilder, embeds: ir.Value, hidden: int, slices: int, dtype: ir.DataType
) -> tuple[ir.Value, list[ir.Value]]:
    """(the embeddings [B, S, H], the k feature slices [B, S, H] in layer order) of a widened
    inputs_embeds [B, S, H·(1 + k)]."""
    with b.scope("layer_features"):
        parts = b.op_multi(
            "Split", embeds, b.const([hidden] * (1 + slices), "widths", "int64"), axis=-1, outputs=1 + slices
        )
        parts = [typed(p, dtype, [B, S, hidden]) for p in parts]
    return parts[0], parts[1:]


def add_layer_features(b: GraphBuilder, h: ir.Value, features: list[ir.Value], layer: int) -> ir.Value:
    """h after layer `layer`, plus that layer's feature slice where it has one (HF adds slice j
    after layer j, the first k layers)."""
    if layer >= len(features):
        return h
    return b.op("Add", h, features[layer], name="layer_features")
