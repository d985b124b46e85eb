"""The optimize stage fuses, folds and prunes without reading a single weight."""

from __future__ import annotations

from collections import Counter

import onnx_ir as ir
from transformers import AutoConfig

from gqa_export.arch import get_spec
from gqa_export.graph.decoder import GraphOptions, build_decoder
from gqa_export.graph.optimize import optimize, remove_dead_inputs
from gqa_export.graph.params import Params
from gqa_export.model.dims import read_dims
from gqa_export.source.weights import WeightStore


def _built(folder):
    spec = get_spec("llama")
    dims = read_dims(AutoConfig.from_pretrained(folder), spec, None)
    store = WeightStore.open(folder)
    opts = GraphOptions(ir.DataType.FLOAT, ir.DataType.FLOAT, rope_rows=256)
    return build_decoder(dims, spec, Params(store, ir.DataType.FLOAT), opts), store


def test_skip_norm_fusion_without_reading_weights(checkpoints):
    model, store = _built(checkpoints.get("head_dim_32"))
    report = optimize(model)
    assert store.reads == 0  # everything stays lazy until the package is saved
    ops = Counter(n.op_type for n in model.graph)
    # 3 layers: each layer's post-attention norm, the next layer's input norm, and the final norm.
    assert report.skip_norm_fusions == ops["SkipSimplifiedLayerNormalization"] == 2 * 3
    assert ops["SimplifiedLayerNormalization"] == 1  # the first input norm has no residual yet
    assert report.nodes_after < report.nodes_before


def test_skip_norms_leave_their_unread_statistics_unnamed(checkpoints):
    """Outputs 1 and 2 (mean, inverse deviation) named make ORT write them every step; the
    residual sum (output 3) stays named wherever the next layer reads it, not after the last."""
    model, _ = _built(checkpoints.get("head_dim_32"))
    optimize(model)
    norms = [n for n in model.graph if n.op_type == "SkipSimplifiedLayerNormalization"]
    assert norms and all(o.name == "" for n in norms for o in n.outputs[1:3])
    proto = ir.serde.serialize_model(model)
    fused = [n for n in proto.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"]
    outputs = [[*n.output, "", "", ""][:4] for n in fused]  # trailing omitted outputs are not written
    assert all(o[1:3] == ["", ""] and o[0] for o in outputs)
    assert [bool(o[3]) for o in outputs] == [True] * (len(fused) - 1) + [False]


def test_dead_inputs_are_removed_but_kv_and_mask_kept(checkpoints):
    model, _ = _built(checkpoints.get("gqa"))
    dead = ir.Value(
        name="position_ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["batch_size", "sequence_length"])
    )
    model.graph.inputs.append(dead)
    assert remove_dead_inputs(model) == ("position_ids",)
    names = [v.name for v in model.graph.inputs]
    assert names[:2] == ["input_ids", "attention_mask"] and "past_key_values.1.value" in names
