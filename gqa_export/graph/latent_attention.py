"""Multi-head latent attention (DeepSeek-V2/V3) as ordinary per-head q/k/v (docs/latent-attention.md).

transformers' DeepseekV2/V3Attention: the query is q_proj(x) or q_b(RMSNorm(q_a(x))), per head
[q_nope | q_rope]; kv_a(x) gives the latent c (kv_lora_rank) and one rope key k_rope shared by the
heads; kv_b(RMSNorm(c)) gives per head [k_nope | v]. RoPE turns q_rope and k_rope only. The key of
head h is [k_nope_h | k_rope], the query [q_nope_h | q_rope_h]: the layout HF concatenates.

Here the expanded K/V go to the ordinary attention ops (every mode's cache layout): one kv head
per query head, the value zero-padded to the key's width (the cache has one head size); the
padded channels of the output are dropped before o_proj (`latent_output`). The latent RMSNorms
are modules built with their default eps (1e-6), not rms_norm_eps.

A.X-K2 (docs/coverage.md): q_b reads [q_a_norm(q_a) | q_a] and yields per head [query | gate]; the
gate's sigmoid scales each value channel of the output, applied by `latent_output` after the padding
is dropped (or the latent output absorbed), so both caches carry it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.output_gate import ACTIVATIONS
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.rotary import rotate
from gqa_export.model.dims import LayerDims, ModelDims
from gqa_export.model.latent import LatentDims

LATENT_NORM_EPS = 1e-6  # DeepseekV2/V3RMSNorm(q_lora_rank / kv_lora_rank) keep their default eps


def _latent(lc: LayerContext) -> LatentDims:
    assert lc.dims.latent is not None
    return lc.dims.latent


def _norm(lc: LayerContext, x: ir.Value, module: str, name: str) -> ir.Value:
    w = lc.b.initializer(lc.name(module), lc.params.vector([lc.name(module)]))
    names = lc.spec.latent_attention
    eps = lc.dims.rms_eps if names is not None and names.config_norm_eps else LATENT_NORM_EPS
    return lc.b.op("SimplifiedLayerNormalization", x, w, axis=-1, epsilon=eps, stash_type=1, name=name)


def _rope_key(lc: LayerContext, k_rope: ir.Value) -> ir.Value:
    """The shared rope key [B,S,1,qk_rope], RMSNormed before RoPE where the spec has that norm (dots3-note)."""
    names = lc.spec.latent_attention
    if names is None or names.rope_key_norm is None:
        return k_rope
    return _norm(lc, k_rope, names.rope_key_norm, "k_rope_layernorm")


def _scaled(lc: LayerContext, x: ir.Value, scale: float, name: str) -> ir.Value:
    """x times a LongCat-Flash lora scale (LatentDims q_scale / kv_scale), as HF multiplies after the
    projection / norm; nothing where the scale is 1 (every other family)."""
    if scale == 1.0:
        return x
    value = lc.b.const(np.asarray(scale, dtype=NUMPY_DTYPES[lc.params.dtype]), name)
    return lc.b.op("Mul", x, value, name=name)


def _query(lc: LayerContext, x: ir.Value) -> ir.Value:
    """The heads' queries [B,S,N*(qk_nope + qk_rope)]: q_proj(x), or q_b of the q_a latent (normed, and raw
    too where the spec's q_b reads both: A.X-K2). Where q_b also yields a value gate per head (spec
    value_gate), the gate [B,S,N*v_head] is left in lc.output_gate for `latent_output`. Times the
    per-token query scale where the spec has one (Mistral-4: HF scales [q_nope | q_rope] after RoPE,
    which is linear, so scaling before it is the same; the latent cache's absorbed query too)."""
    lat, names = _latent(lc), lc.spec.latent_attention
    assert names is not None
    if names.value_gate_proj is not None:  # HunYuan-V4: the value gate is a Linear of the normed input
        lc.output_gate["value_gate"] = linear(lc, x, [names.value_gate_proj], None, "gate_proj")
    if not lat.q_lora_rank:
        return _position_scaled(lc, linear(lc, x, [names.q], None, "q_proj"))
    q_a = linear(lc, x, [names.q_a], None, "q_a_proj")
    q = _norm(lc, q_a, names.q_a_norm, "q_a_layernorm")
    if names.q_b_input != ("normed",):  # A.X-K2: [q_a_norm(q_a) | q_a]
        q = lc.b.op("Concat", *({"normed": q, "raw": q_a}[part] for part in names.q_b_input), axis=-1, name="q_b_in")
    q = _scaled(lc, linear(lc, q, [names.q_b], None, "q_b_proj"), lat.q_scale, "q_lora_scale")
    return _position_scaled(lc, _value_gate_split(lc, q) if names.value_gate else q)


def _position_scaled(lc: LayerContext, q: ir.Value) -> ir.Value:
    """q [B,S,N*D] times the [B,S,1] per-token scale where the spec has one (graph/positions.py)."""
    return q if lc.query_scale is None else lc.b.op("Mul", q, lc.query_scale, name="query_scale")


def _value_gate_split(lc: LayerContext, q: ir.Value) -> ir.Value:
    """q_b's per-head [query | gate] rows apart: the queries [B,S,N*head_dim] returned, the gate kept."""
    b, lat, heads = lc.b, _latent(lc), lc.dims.num_heads
    rows = b.op("Reshape", q, b.const([0, 0, heads, lat.head_dim + lat.v_head], "q_gate_heads", "int64"))
    query_gate = b.const([lat.head_dim, lat.v_head], "query_gate_split", "int64")
    query, gate = b.op_multi("Split", rows, query_gate, axis=-1, outputs=2, name="q_gate_split")
    flat = b.const([0, 0, -1], "q_gate_flat", "int64")
    lc.output_gate["value_gate"] = b.op("Reshape", gate, flat, name="value_gate_flat")
    return b.op("Reshape", query, flat, name="q_ungated_flat")


def _rope_parts(
    lc: LayerContext, q: ir.Value, compressed: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value | None, ir.Value | None]:
    """(q_nope, the latent c, q_rope, k_rope): the query heads and kv_a's output split at the rope channels;
    with qk_rope_head_dim 0 nothing is split (ONNX Reshape reads a 0 in a shape as "copy that axis")."""
    b, lat = lc.b, _latent(lc)
    if not lat.qk_rope:
        return q, compressed, None, None
    nope_rope = b.const([lat.qk_nope, lat.qk_rope], "nope_rope_split", "int64")
    q_nope, q_rope = b.op_multi("Split", q, nope_rope, axis=-1, outputs=2, name="q_split")
    latent_rope = b.const([lat.kv_lora_rank, lat.qk_rope], "latent_rope_split", "int64")
    c, k_rope = b.op_multi("Split", compressed, latent_rope, axis=-1, outputs=2, name="latent_split")
    return q_nope, c, q_rope, k_rope


def latent_heads(lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None) -> dict[str, ir.Value]:
    """q, k, v shaped [B,S,N,D] with D = qk_nope + qk_rope (v zero-padded to D), RoPE applied to
    the rope channels by `table` (cos, sin rows of this step's positions)."""
    b, lat, heads = lc.b, _latent(lc), lc.dims.num_heads
    names = lc.spec.latent_attention
    assert names is not None
    q = _query(lc, x)
    q = b.op("Reshape", q, b.const([0, 0, heads, lat.head_dim], "q_heads", "int64"))
    compressed = linear(lc, x, [names.kv_a], None, "kv_a_proj_with_mqa")
    q_nope, c, q_rope, k_rope = _rope_parts(lc, q, compressed)
    c = _scaled(lc, _norm(lc, c, names.kv_a_norm, "kv_a_layernorm"), lat.kv_scale, "kv_lora_scale")
    kv = linear(lc, c, [names.kv_b], None, "kv_b_proj")
    kv = b.op("Reshape", kv, b.const([0, 0, heads, lat.qk_nope + lat.v_head], "kv_heads", "int64"))
    nope_v = b.const([lat.qk_nope, lat.v_head], "nope_v_split", "int64")
    k_nope, v = b.op_multi("Split", kv, nope_v, axis=-1, outputs=2, name="kv_split")
    if q_rope is None or k_rope is None:  # no rope channels (GLM-5-Next's NoPE): the heads are their nope parts
        out = {"q": q_nope, "k": k_nope, "v": v}
    else:
        k_rope = _rope_key(lc, b.op("Reshape", k_rope, b.const([0, 0, 1, lat.qk_rope], "k_rope_head", "int64")))
        if table is not None:
            rope = lc.dims.ropes[lc.layer.rope]  # type: ignore[index]
            q_rope = rotate(b, q_rope, table[0], table[1], rope, lat.qk_rope, "q_rope")
            k_rope = rotate(b, k_rope, table[0], table[1], rope, lat.qk_rope, "k_rope")
        k_rope = b.op("Expand", k_rope, b.op("Shape", q_rope), name="k_rope_every_head")
        out = {
            "q": b.op("Concat", q_nope, q_rope, axis=-1, name="q_concat"),
            "k": b.op("Concat", k_nope, k_rope, axis=-1, name="k_concat"),
            "v": v,
        }
    if lat.v_head < lat.head_dim:  # the cache has one head size: values padded with zeros
        pads = b.const([0, 0, 0, 0, 0, 0, 0, lat.head_dim - lat.v_head], "v_pads", "int64")
        out["v"] = b.op("Pad", v, pads, name="v_pad")
    return out


def latent_flat(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """q, k, v flattened to [B,S,N*D] for GroupQueryAttention (do_rotary=0: RoPE applied here)."""
    flat = lc.b.const([0, 0, -1], "heads_flat", "int64")
    q, k, v = (lc.b.op("Reshape", value, flat, name=f"{n}_flat") for n, value in latent_heads(lc, x, table).items())
    return q, k, v


def latent_output(lc: LayerContext, y: ir.Value) -> ir.Value:
    """The attention output [B,S,N*D] without the padded value channels: [B,S,N*v_head_dim], each channel
    times the activated value gate where q_b yields one (A.X-K2: after the padding is dropped, since the
    gate has a value per value channel)."""
    out = _unpadded_output(lc, y)
    gate = lc.output_gate.get("value_gate")
    if gate is None:
        return out
    activated = lc.b.op(ACTIVATIONS[lc.spec.output_gate_activation], gate)
    return lc.b.op("Mul", out, activated, name="value_gate")


def _unpadded_output(lc: LayerContext, y: ir.Value) -> ir.Value:
    b, lat, heads = lc.b, _latent(lc), lc.dims.num_heads
    if lat.cached:
        return _latent_cache_output(lc, y)
    if lat.v_head == lat.head_dim:
        return y
    per_head = b.op("Reshape", y, b.const([0, 0, heads, lat.head_dim], "out_heads", "int64"))
    kept = b.op(
        "Slice", per_head, b.const([0], "zero_start", "int64"), b.const([lat.v_head], "v_end", "int64"),
        b.const([-1], "last_axis", "int64"), name="drop_v_padding",
    )  # fmt: skip
    return b.op("Reshape", kept, b.const([0, 0, heads * lat.v_head], "out_flat", "int64"))


# ---- the latent cache (recipe attention.latent_cache): multi-query attention over [c | k_rope] ----
# q_nope_h . k_nope_h = q_nope_h . (W_k_h c) = (q_nope_h W_k_h) . c, and sum_t p_t v_h,t = W_v_h (sum_t p_t c_t),
# with W_k_h [nope, r] and W_v_h [v, r] head h's rows of kv_b_proj. So GQA with ONE kv head of width
# r + rope, keys [RMSNorm(c) | k_rope] and queries [q_nope_h W_k_h | q_rope_h], gives each head
# sum_t p_t c_t in its first r channels (values = keys; the rope channels are dropped), and W_v_h turns
# that into the head's output: HF's numbers up to float rounding, with r + rope numbers per token in
# each of the key and value buffers instead of 2 N (nope + rope).


def latent_cache_dims(dims: ModelDims) -> ModelDims:
    """`dims` with the latent cache: one kv head of kv_lora_rank + qk_rope_head_dim per layer."""
    if dims.latent is None:
        raise InputError(
            "attention.latent_cache is for multi-head latent attention only "
            "(DeepSeek-V2/V3, MiniCPM3, Sarvam-MLA, GLM-4-MoE-Lite, LongCat-Flash)"
        )
    lat = replace(dims.latent, cached=True)

    def cached(layer: LayerDims) -> LayerDims:  # a layer with its own widths (dots3-note) caches its own latent
        own = layer.attention
        mine = lat if own is None else replace(own.latent, cached=True)
        attention = None if own is None else replace(own, latent=mine)
        return replace(layer, head_dim=mine.kv_lora_rank + mine.qk_rope, num_kv_heads=1, attention=attention)

    return replace(dims, latent=lat, layers=tuple(cached(layer) for layer in dims.layers))


def _absorbed(lc: LayerContext, part: str) -> ir.Value:
    """kv_b_proj's per-head blocks as [N, nope, r] ("k": W_k_h) or [N, r, v] ("v": W_v_h transposed)."""
    lat, heads = _latent(lc), lc.dims.num_heads
    name = lc.name(lc.spec.latent_attention.kv_b)  # type: ignore[union-attr]

    def make() -> np.ndarray:
        w = lc.params.store.read(name).astype(np.float32).reshape(heads, lat.qk_nope + lat.v_head, lat.kv_lora_rank)
        return w[:, : lat.qk_nope, :] if part == "k" else w[:, lat.qk_nope :, :].transpose(0, 2, 1)

    shape = (heads, lat.qk_nope, lat.kv_lora_rank) if part == "k" else (heads, lat.kv_lora_rank, lat.v_head)
    return lc.b.initializer(f"{name.removesuffix('.weight')}.absorbed_{part}", lc.params.computed(shape, make))


def latent_mqa(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """GQA's query [B,S,N*(r+rope)] and its one-head key = value [B,S,r+rope] (RoPE applied)."""
    b, lat, heads = lc.b, _latent(lc), lc.dims.num_heads
    names = lc.spec.latent_attention
    assert names is not None
    q = _query(lc, x)
    q = b.op("Reshape", q, b.const([0, 0, heads, 1, lat.head_dim], "q_heads_row", "int64"))
    compressed = linear(lc, x, [names.kv_a], None, "kv_a_proj_with_mqa")
    q_nope, c, q_rope, k_rope = _rope_parts(lc, q, compressed)
    q_latent = b.op("MatMul", q_nope, _absorbed(lc, "k"), name="q_absorbed")  # [B,S,N,1,r]
    per_head = b.const([0, 0, heads, -1], "per_head", "int64")
    q_latent = b.op("Reshape", q_latent, per_head)
    c = _scaled(lc, _norm(lc, c, names.kv_a_norm, "kv_a_layernorm"), lat.kv_scale, "kv_lora_scale")
    c = b.op("Unsqueeze", c, b.const([2], "head_axis", "int64"))
    flat = b.const([0, 0, -1], "heads_flat", "int64")
    if q_rope is None or k_rope is None:  # no rope channels: the query latent and c alone
        return b.op("Reshape", q_latent, flat, name="q_flat"), *(2 * (b.op("Reshape", c, flat, name="k_flat"),))
    q_rope = b.op("Reshape", q_rope, per_head)
    k_rope = _rope_key(lc, b.op("Reshape", k_rope, b.const([0, 0, 1, lat.qk_rope], "k_rope_head", "int64")))
    if table is not None:
        rope = lc.dims.ropes[lc.layer.rope]  # type: ignore[index]
        q_rope = rotate(b, q_rope, table[0], table[1], rope, lat.qk_rope, "q_rope")
        k_rope = rotate(b, k_rope, table[0], table[1], rope, lat.qk_rope, "k_rope")
    q = b.op("Reshape", b.op("Concat", q_latent, q_rope, axis=-1), flat, name="q_flat")
    k = b.op("Reshape", b.op("Concat", c, k_rope, axis=-1), flat, name="k_flat")
    return q, k, k


def _latent_cache_output(lc: LayerContext, y: ir.Value) -> ir.Value:
    """GQA's output [B,S,N*(r+rope)]: each head's first r channels times W_v_h: [B,S,N*v]."""
    b, lat, heads = lc.b, _latent(lc), lc.dims.num_heads
    rows = b.op("Reshape", y, b.const([0, 0, heads, 1, lat.kv_lora_rank + lat.qk_rope], "out_rows", "int64"))
    kept = b.op(
        "Slice", rows, b.const([0], "zero_start", "int64"), b.const([lat.kv_lora_rank], "latent_end", "int64"),
        b.const([-1], "last_axis", "int64"), name="latent_channels",
    )  # fmt: skip
    out = b.op("MatMul", kept, _absorbed(lc, "v"), name="v_absorbed")  # [B,S,N,1,v]
    return b.op("Reshape", out, b.const([0, 0, heads * lat.v_head], "out_flat", "int64"))
