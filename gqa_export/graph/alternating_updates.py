"""Alternating updates (AltUp) over K parallel hidden streams (docs/gemma3n.md §1.3).

The residual stream is K streams, kept here as one [B, S, K, H] tensor:
- spread (after the embedding): stream 0 is the embedding x0, stream k the projection
  `altup_projections[k-1](x0)` rescaled to x0's RMS magnitude (its own magnitude floored at 1e-5
  before the square root);
- each layer predicts, computes one stream, corrects: with router modalities
  `m(x) = tanh(router(router_norm(x) / H))` [B, S, K],
  predict: `P = reshape(prediction(m(streams[a])), [K, K])`, `pred_i = streams_i + sum_j P[i, j] streams_j`;
  the layer runs on `pred[a]` only (a = altup_active_idx) giving `act`;
  correct: `c = correction(m(act)) + 1`, `out_i = pred_i + c_i * (act - pred[a])`;
  the per-layer input, read from `out[a]` (times correct_output_scale), is added to streams 1..K-1;
- merge (before the final norm): stream 0, and `altup_unembed_projections[k-1](streams[k])`
  rescaled to stream 0's magnitude, averaged over the K streams.
altup_coef_clip clamps the coefficient weights only while training: nothing at inference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import GraphBuilder, float_scalar, typed
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.graph.per_layer import per_layer_term
from gqa_export.graph.standard import LayerKV
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"
StreamLayer = Callable[[LayerContext, ir.Value], tuple[ir.Value, LayerKV | None]]


def _stream(b: GraphBuilder, streams: ir.Value, k: int, name: str) -> ir.Value:
    return b.op("Gather", streams, b.const(k, "stream_index", "int64"), axis=2, name=name)


def _magnitude(b: GraphBuilder, x: ir.Value, dtype: ir.DataType, floor: bool) -> ir.Value:
    """sqrt(mean(x^2)) over the channels [B, S, 1]; with `floor` the mean is at least 1e-5 first."""
    mean = b.op("ReduceMean", b.op("Mul", x, x), b.const([-1], "channel_axis", "int64"), keepdims=1)
    if floor:
        mean = b.op("Max", mean, float_scalar(b, 1e-5, dtype, "magnitude_floor"))
    return b.op("Sqrt", mean)


def _rescaled(b: GraphBuilder, x: ir.Value, target: ir.Value, dtype: ir.DataType) -> ir.Value:
    """x * target / |x| as one more stream [B, S, 1, H]."""
    y = b.op("Div", b.op("Mul", x, target), _magnitude(b, x, dtype, floor=True), name="rescaled")
    return b.op("Unsqueeze", y, b.const([2], "stream_axis", "int64"))


def _projection(b: GraphBuilder, x: ir.Value, spec: ArchSpec, params: Params, module: str) -> ir.Value:
    name = spec.tensor(f"{module}.weight")
    return b.op("MatMul", x, b.initializer(name, params.matmul_weight([name])))


def spread_streams(b: GraphBuilder, x0: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params) -> ir.Value:
    """[B, S, K, H]: the embedding and its K - 1 projections at the embedding's magnitude."""
    assert dims.altup is not None and spec.alternating_updates is not None
    dtype = params.dtype
    with b.scope("altup_spread"):
        target = _magnitude(b, x0, dtype, floor=False)
        parts = [b.op("Unsqueeze", x0, b.const([2], "stream_axis", "int64"))]
        for k in range(1, dims.altup.streams):
            module = spec.alternating_updates.projections.format(k=k - 1)
            parts.append(_rescaled(b, _projection(b, x0, spec, params, module), target, dtype))
        return b.op("Concat", *parts, axis=2, name="streams") if len(parts) > 1 else parts[0]


def merge_streams(b: GraphBuilder, streams: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params) -> ir.Value:
    """[B, S, H]: the mean of stream 0 and the unembedded streams at stream 0's magnitude."""
    assert dims.altup is not None and spec.alternating_updates is not None
    dtype = params.dtype
    with b.scope("altup_merge"):
        first = _stream(b, streams, 0, "stream_0")
        target = _magnitude(b, first, dtype, floor=False)
        parts = [b.op("Unsqueeze", first, b.const([2], "stream_axis", "int64"))]
        for k in range(1, dims.altup.streams):
            module = spec.alternating_updates.unembed_projections.format(k=k - 1)
            stream = _stream(b, streams, k, f"stream_{k}")
            parts.append(_rescaled(b, _projection(b, stream, spec, params, module), target, dtype))
        stacked = b.op("Concat", *parts, axis=2) if len(parts) > 1 else parts[0]
        merged = b.op("ReduceMean", stacked, b.const([2], "stream_axis", "int64"), keepdims=0, name="mean")
        return typed(merged, dtype, [B, S, dims.hidden_size])


def _router(lc: LayerContext) -> Callable[[ir.Value], ir.Value]:
    """The layer's modalities m(x) = tanh(router(router_norm(x) / H)) [B, S, K]; predict and
    correct both call it, on one set of initializers."""
    names, b, params, dims = lc.spec.alternating_updates, lc.b, lc.params, lc.dims
    assert names is not None
    norm, router = lc.name(names.router_norm), lc.name(names.router)
    weight = b.initializer(norm, params.vector([norm], offset=dims.norm_offset))
    matrix = b.initializer(router, params.matmul_weight([router]))
    scale = float_scalar(b, dims.hidden_size**-1.0, params.dtype, "router_input_scale")

    def modalities(x: ir.Value) -> ir.Value:
        normed = b.op("SimplifiedLayerNormalization", x, weight, axis=-1, epsilon=dims.rms_eps, stash_type=1,
                      name="router_norm")  # fmt: skip
        routed = b.op("MatMul", b.op("Mul", normed, scale), matrix, name="router")
        return b.op("Tanh", routed, name="modalities")

    return modalities


def alternating_layer(
    lc: LayerContext, streams: ir.Value, layer: StreamLayer, per_layer: ir.Value | None, correct: bool = True
) -> tuple[ir.Value, LayerKV | None]:
    """Predict the streams, run `layer` on the active one, correct them all, add the per-layer
    input to streams 1..K-1. `correct` False drops the correction (a test mutant)."""
    names, alt, b, dtype = lc.spec.alternating_updates, lc.dims.altup, lc.b, lc.params.dtype
    assert names is not None and alt is not None
    k, modalities = alt.streams, _router(lc)
    with b.scope("altup_predict"):
        coefs = linear(lc, modalities(_stream(b, streams, alt.active, "active_input")), [names.prediction],
                       None, "prediction")  # fmt: skip
        coefs = b.op("Reshape", coefs, b.const([0, 0, k, k], "coef_matrix", "int64"))
        predictions = b.op(
            "Add", b.op("Einsum", coefs, streams, equation="bsij,bsjh->bsih", name="mix"), streams, name="predictions"
        )
        active = typed(_stream(b, predictions, alt.active, "active"), dtype, [B, S, lc.dims.hidden_size])
    activated, kv = layer(lc, active)
    corrected = predictions
    if correct:
        with b.scope("altup_correct"):
            coefs = linear(lc, modalities(activated), [names.correction], None, "correction")
            coefs = b.op("Add", coefs, float_scalar(b, 1.0, dtype, "one"))
            innovation = b.op("Sub", activated, active, name="innovation")
            spread = b.op("Mul", b.op("Unsqueeze", innovation, b.const([2], "stream_axis", "int64")),
                          b.op("Unsqueeze", coefs, b.const([-1], "last_axis", "int64")))  # fmt: skip
            corrected = b.op("Add", spread, predictions, name="corrected")
    if per_layer is None:
        return corrected, kv
    first = _stream(b, corrected, alt.active, "corrected_active")
    if alt.correct_scale:
        name = lc.name(names.output_scale, "")
        first = b.op("Mul", first, b.initializer(name, lc.params.vector([name])), name="correct_output_scale")
    with b.scope("per_layer_input"):
        y = per_layer_term(lc, typed(first, dtype, [B, S, lc.dims.hidden_size]), per_layer)
        if y is None:
            return corrected, kv
        others = np.ones((k, 1), NUMPY_DTYPES[dtype])
        others[0] = 0  # streams 1..K-1 only (stream 0 whatever the active one is)
        y = b.op("Mul", b.op("Unsqueeze", y, b.const([2], "stream_axis", "int64")), b.const(others, "other_streams"))
        return b.op("Add", corrected, y, name="streams"), kv
