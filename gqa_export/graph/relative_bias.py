"""A relative position bias computed per query and head (Inkling, docs/coverage.md's Inkling section).

Each token's relative states r = r_proj(x) [Nq, d_rel] times the layer's learned bank [d_rel, E] give one
logit per backward distance 0 .. E - 1; the score of query position p against key position t gets the logit
of distance p - t, zero where p - t >= E (E: a sliding layer's window, the full layers' rel_extent) or < 0
(causality is the attention's own mask). The bias [B, Nq, S, T] is GroupQueryAttention's attention_bias
input, which the CPU kernel adds after scaling and before its causal / window mask (docs/ort-ops.md §1.9),
so the op keeps causal=1 and its window. Keys sit at their position's slot (the shared buffer's compact
layout, docs/ort-ops.md §1.5), queries at cumsum(attention_mask) - 1, as GQA numbers them.

The full layers' queries and bias are multiplied by tau = 1 + alpha log(max((p + 1) / floor, 1)) where the
config sets log_scaling_n_floor (HF's log scaling, computed in float32 as HF does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, head_norm, linear
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.masks import token_positions
from gqa_export.graph.params import NUMPY_DTYPES, WIDER_THAN_IO_META
from gqa_export.graph.residual_convs import convolved_keys_values
from gqa_export.model.dims import ModelDims


@dataclass(frozen=True)
class RelativeDistances:
    """Graph-wide values every layer's bias reads: per extent E, the gather index clamp(p - t, 0, E - 1) [B, S, T, 1]
    (GatherND's rows, shared by the heads) and where p - t falls outside [0, E) [B, 1, S, T]; the full layers' log
    scale [B, S, 1] (None: none)."""

    index: dict[int, ir.Value] = field(default_factory=dict)
    outside: dict[int, ir.Value] = field(default_factory=dict)
    log_scale: ir.Value | None = None


def relative_distances(
    b: GraphBuilder, dims: ModelDims, input_ids: ir.Value, attention_mask: ir.Value, dtype: ir.DataType
) -> RelativeDistances:
    """The distances of this run's queries to every key slot, per extent the layers use, built once."""
    relative = dims.relative
    assert relative is not None
    out = RelativeDistances()
    with b.scope("relative_positions"):
        positions = token_positions(b, input_ids, attention_mask)  # [B,S]
        total = b.op("Squeeze", b.op("Shape", attention_mask, start=1, end=2), b.const([0], "axis0", "int64"))
        keys = b.op("Range", b.const(0, "start", "int64"), total, b.const(1, "step", "int64"), name="key_slots")
        queries = b.op("Unsqueeze", positions, b.const([1, 3], "query_axes", "int64"))  # [B,1,S,1]
        distance = b.op("Sub", queries, keys, name="distance")  # [B,1,S,T]
        zero = b.const([0], "zero", "int64")
        for extent in sorted(set(relative.extents)):
            last = b.const([extent - 1], f"last{extent}", "int64")
            clamped = b.op("Min", b.op("Max", distance, zero), last, name=f"clamped{extent}")
            out.index[extent] = b.op("Transpose", clamped, perm=[0, 2, 3, 1], name=f"index{extent}")  # [B,S,T,1]
            beyond = b.op("Greater", distance, last, name=f"beyond{extent}")
            out.outside[extent] = b.op("Or", b.op("Less", distance, zero), beyond, name=f"outside{extent}")
        if relative.log_floor:  # 1 + alpha log(max((p + 1) / floor, 1)), float32 as HF
            count = b.op("Cast", b.op("Add", positions, b.const([1], "one", "int64")), to=ir.DataType.FLOAT)
            ratio = b.op("Div", count, _float32(b, relative.log_floor, "floor"))
            log = b.op("Log", b.op("Max", ratio, _float32(b, 1.0, "unit")))
            tau = b.op("Add", b.op("Mul", log, _float32(b, relative.log_alpha, "alpha")), _float32(b, 1.0, "one_f"))
            tau = b.op("Unsqueeze", tau, b.const([2], "last_axis", "int64"))  # [B,S,1]
            out = RelativeDistances(out.index, out.outside, b.op("Cast", tau, to=dtype, name="log_scale"))
    return out


def _float32(b: GraphBuilder, value: float, name: str) -> ir.Value:
    """A float32 scalar of the log scale, which HF computes in float32 whatever the model's dtype."""
    const = b.const(np.asarray(value, np.float32), name)
    const.meta[WIDER_THAN_IO_META] = True
    return const


def relative_attention_inputs(
    lc: LayerContext, x: ir.Value, distances: RelativeDistances
) -> tuple[tuple[ir.Value, ir.Value, ir.Value], ir.Value, None]:
    """((query, key, value) [B,S,heads*D] for GroupQueryAttention, its attention_bias [B,Nq,S,T], no head_sink):
    the keys and values through their residual convolution before the per-head q/k RMSNorms
    (graph/residual_convs.py), the full layers' queries log-scaled."""
    L, b, layer = lc.spec.layer, lc.b, lc.layer
    heads, kv_heads, d = lc.dims.num_heads, layer.num_kv_heads, layer.head_dim
    attention = L.q.rpartition(".")[0]
    if lc.packed_qkv:
        packed = linear(lc, x, [L.q, L.k, L.v], f"{attention}.qkv_proj", "qkv_proj")
        sizes = b.const([heads * d, kv_heads * d, kv_heads * d], "qkv_split", "int64")
        q, k, v = b.op_multi("Split", packed, sizes, axis=-1, outputs=3, name="qkv_split")
    else:
        q, k, v = (linear(lc, x, [m], None, n) for m, n in ((L.q, "q_proj"), (L.k, "k_proj"), (L.v, "v_proj")))
    k, v = convolved_keys_values(lc, k, v)
    q, k = (_normed_heads(lc, t, module, n, tag) for t, module, n, tag in ((q, L.q_norm, heads, "q"),
                                                                         (k, L.k_norm, kv_heads, "k")))  # fmt: skip
    scale = distances.log_scale if layer.window <= 0 else None
    if scale is not None:
        q = b.op("Mul", q, scale, name="query_log_scale")
    return (q, k, v), relative_bias(lc, x, distances, scale), None


def _normed_heads(lc: LayerContext, x: ir.Value, module: str | None, heads: int, tag: str) -> ir.Value:
    b, d = lc.b, lc.layer.head_dim
    per_head = b.op("Reshape", x, b.const([0, 0, heads, d], f"{tag}_heads", "int64"))
    y = head_norm(lc, per_head, module, f"{tag}_norm", heads)
    return b.op("Reshape", y, b.const([0, 0, heads * d], f"{tag}_flat", "int64"))


def relative_bias(
    lc: LayerContext,
    x: ir.Value,
    distances: RelativeDistances,
    scale: ir.Value | None,
    transform: Callable[[ir.Value], ir.Value] | None = None,
) -> ir.Value:
    """[B,Nq,S,T]: each query's relative logits at its distance to each key slot, zero outside [0, E), times the
    log `scale` where given. `transform`: applied to the relative states [B,S,Nq,d_rel] before the bank (Inkling2's
    learned-scale L2 clip)."""
    names, b, params, heads = lc.spec.relative_bias, lc.b, lc.params, lc.dims.num_heads
    assert names is not None and lc.dims.relative is not None
    extent, width = lc.dims.relative.extents[lc.i], lc.dims.relative.width
    bank_name = lc.name(names.bank, suffix="")
    stored = tuple(params.store.info(bank_name).shape)
    if stored != (width, extent):
        from gqa_export.errors import InputError

        raise InputError(f"layer {lc.i}: {bank_name} is {list(stored)}, the config gives [{width}, {extent}]")
    with b.scope("relative_bias"):
        states = linear(lc, x, [names.r_proj], None, "r_proj")
        states = b.op("Reshape", states, b.const([0, 0, heads, width], "relative_heads", "int64"))  # [B,S,Nq,dr]
        states = transform(states) if transform is not None else states
        # [1, d_rel, E]: a 3-D MatMul weight, which int4 / int8 keep float (d_rel rows are fewer than a block)
        bank = params.derived(bank_name, lambda w: w[None], shape=(1, width, extent))
        logits = b.op("MatMul", states, b.initializer(bank_name, bank), name="bank")  # [B,S,Nq,E]
        # each query's row of distances gathers every head's logit at once: an index [B,S,T,1], not one per head
        logits = b.op("Transpose", logits, perm=[0, 1, 3, 2], name="by_distance")  # [B,S,E,Nq]
        bias = b.op("GatherND", logits, distances.index[extent], batch_dims=2, name="at_distance")  # [B,S,T,Nq]
        bias = b.op("Transpose", bias, perm=[0, 3, 1, 2], name="per_head")  # [B,Nq,S,T]
        zero = b.const(np.asarray(0.0, NUMPY_DTYPES[params.dtype]), "zero")
        bias = b.op("Where", distances.outside[extent], zero, bias, name="within_extent")
        if scale is not None:  # [B,S,1] -> [B,1,S,1]
            bias = b.op("Mul", bias, b.op("Unsqueeze", scale, b.const([1], "head_axis", "int64")), name="log_scaled")
        return bias
