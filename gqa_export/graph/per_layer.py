"""Per-layer embeddings (Gemma-4 PLE), computed in the graph from `input_ids`.

transformers' Gemma4TextModel (models/gemma4/modeling_gemma4.py; docs/gemma4.md §1.2, §1.3):
- token part: `embed_tokens_per_layer[ids] * sqrt(P)`, a [V_ple, L*P] table viewed as [B,S,L,P];
- context part: `RMSNorm_P(per_layer_model_projection(x0) * H**-0.5)` over [B,S,L,P], x0 the
  scaled main embedding, one norm weight [P] for all layers;
- `per_layer_inputs = (context + token) * 2**-0.5`; layer i reads [:, :, i, :] after its MLP:
  `h + post_per_layer_input_norm(per_layer_projection(act(per_layer_input_gate(h)) * pli_i))`.

The table is the largest tensor of the model (262144 x L*P); it streams in row blocks like every
other weight. `input_ids` are the ids the main embedding reads (multimodal placeholders already
mapped to `pad_token_id`, as HF's multimodal model does before both lookups).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import GraphBuilder, float_scalar, typed
from gqa_export.graph.params import QUANTIZE_TABLE_META, Params
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"


def per_layer_inputs(
    b: GraphBuilder, input_ids: ir.Value, embeds: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params
) -> ir.Value:
    """[B, S, L, P] per-layer inputs from the ids and the scaled main embedding."""
    assert spec.per_layer_inputs is not None
    names = spec.per_layer_inputs
    layers, width, dtype = dims.num_layers, dims.per_layer_input_size, params.dtype
    per_layer_shape = b.const([0, 0, layers, width], "per_layer_shape", "int64")
    with b.scope("per_layer_inputs"):
        table_name = spec.tensor(names.table)
        table = b.initializer(table_name, params.matrix(table_name))
        table.meta[QUANTIZE_TABLE_META] = True  # int4/int8 builds quantize it (GatherBlockQuantized)
        if 0 < dims.per_layer_vocab < dims.vocab_size:  # Gemma-3n: ids past the table read row 0
            rows = b.const(dims.per_layer_vocab, "table_rows", "int64")
            input_ids = b.op("Where", b.op("Less", input_ids, rows), input_ids, b.const(0, "row0", "int64"))
        token = b.op("Gather", table, input_ids)
        token = b.op("Mul", token, float_scalar(b, math.sqrt(width), dtype, "token_scale"))
        token = b.op("Reshape", token, per_layer_shape, name="token_part")
        projection_name = spec.tensor(names.projection)
        projected = b.op("MatMul", embeds, b.initializer(projection_name, params.matmul_weight([projection_name])))
        projected = b.op("Mul", projected, float_scalar(b, dims.hidden_size**-0.5, dtype, "projection_scale"))
        projected = b.op("Reshape", projected, per_layer_shape)
        context = normalize(b, projected, spec.tensor(names.norm), params, dims, "projection_norm", 0)
        combined = b.op("Mul", b.op("Add", context, token), float_scalar(b, 2.0**-0.5, dtype, "input_scale"))
        return typed(combined, dtype, [B, S, layers, width])


def add_per_layer_input(lc: LayerContext, h: ir.Value, per_layer: ir.Value) -> ir.Value:
    """h + norm(projection(act(gate(h)) * per_layer[:, :, i])) for layer i (its modules present)."""
    b = lc.b
    with b.scope("per_layer_input"):
        y = per_layer_term(lc, h, per_layer)
        if y is None:
            return h
        shape = [B, S, lc.dims.hidden_size]
        return typed(b.op("Add", h, y, name="residual"), lc.params.dtype, shape)


def per_layer_term(lc: LayerContext, h: ir.Value, per_layer: ir.Value) -> ir.Value | None:
    """norm(projection(act(gate(h)) * per_layer[:, :, i])) [B,S,H] for layer i, None where the
    layer has no per-layer-input modules (in the caller's scope)."""
    L, b = lc.spec.layer, lc.b
    if not (L.per_layer_gate and L.per_layer_projection and L.per_layer_norm and lc.has(L.per_layer_gate)):
        return None
    mine = b.op("Gather", per_layer, b.const(lc.i, "layer_index", "int64"), axis=2)  # [B,S,P]
    gate = activation(lc, linear(lc, h, [L.per_layer_gate], None, "gate"))
    y = linear(lc, b.op("Mul", gate, mine), [L.per_layer_projection], None, "projection")
    return normalize(b, y, lc.name(L.per_layer_norm), lc.params, lc.dims, "norm", lc.dims.hidden_size)
