"""Attention whose one KV head is both key and value (DeepSeek-V4; docs/coverage.md, section "deepseek_v4").

What the modeling code does, and the package with it:
- query: q_b(RMSNorm(q_a(x))) split into heads, each head through a weightless RMSNorm (eps rms_norm_eps);
- key = value: RMSNorm(kv(x)), one [head_dim] head;
- RoPE (interleaved pairs) on the *trailing* rotary_dim channels of each query head and of the key, so the cached
  value carries the key's rotation; on sliding layers GroupQueryAttention gets the rotated key as both key and value
  (its two caches hold the same rows), its head_sink the per-head sinks, its local_window_size the sliding window
  (the compressed-KV layers attend with plain ops instead: graph/compressed_kv.py);
- the output's trailing channels rotated back by the query's angle (cos, -sin), which leaves each value's
  contribution a function of its distance to the query;
- a grouped low-rank output projection: the heads' outputs in o_groups groups, each group through its own block of
  o_a ([groups * rank, heads * head_dim / groups]: one batched MatMul over [groups, in, rank]), the groups'
  outputs concatenated and mixed to the hidden size by o_b.
RoPE is applied here with plain ops (graph/rotary.rotate on the trailing slice), never by the op.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import typed
from gqa_export.graph.decoder_layer import Mixer
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.rotary import rotate
from gqa_export.graph.standard import LayerKV

B, S = "batch_size", "sequence_length"
Table = tuple[ir.Value, ir.Value]


def rotate_trailing(lc: LayerContext, x: ir.Value, table: Table, name: str, inverse: bool = False) -> ir.Value:
    """RoPE on the last rotary_dim channels of x [B, S, N, D] (by minus the angle where `inverse`)."""
    b, layer = lc.b, lc.layer
    assert layer.rope is not None
    rope, head_dim = lc.dims.ropes[layer.rope], layer.head_dim
    cos, sin = table
    if inverse:
        sin = b.op("Neg", sin, name=f"{name}/minus_sin")
    rotary = rope.rotary_dim
    if rotary == head_dim:
        return rotate(b, x, cos, sin, rope, rotary, name)
    sizes = b.const([head_dim - rotary, rotary], "nope_rope_split", "int64")
    plain, turned = b.op_multi("Split", x, sizes, axis=-1, outputs=2, name=f"{name}/trailing")
    return b.op("Concat", plain, rotate(b, turned, cos, sin, rope, rotary, name), axis=-1, name=f"{name}/joined")


def _heads(lc: LayerContext, x: ir.Value, count: int) -> ir.Value:
    return lc.b.op("Reshape", x, lc.b.const([0, 0, count, lc.layer.head_dim], f"heads{count}", "int64"))


def shared_kv_qkv(lc: LayerContext, x: ir.Value, table: Table) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(query [B, S, N*D], key [B, S, D], value: the key) for GroupQueryAttention, rotated here."""
    b, dims, params = lc.b, lc.dims, lc.params
    names, shapes = lc.spec.shared_kv_attention, dims.shared_kv
    assert names is not None and shapes is not None
    flat = b.const([0, 0, -1], "heads_flat", "int64")
    with b.scope("q"):
        latent = linear(lc, x, [names.q_a], None, "q_a_proj")
        latent = normalize(b, latent, lc.name(names.q_a_norm), params, dims, "q_a_norm", shapes.q_lora_rank)
        q = _heads(lc, linear(lc, latent, [names.q_b], None, "q_b_proj"), dims.num_heads)
        ones = b.const(np.ones(lc.layer.head_dim, NUMPY_DTYPES[params.dtype]), "head_norm_ones")
        q = b.op("SimplifiedLayerNormalization", q, ones, axis=-1, epsilon=dims.rms_eps, stash_type=1, name="q_b_norm")
        q = b.op("Reshape", rotate_trailing(lc, q, table, "q_rope"), flat, name="q_flat")
    with b.scope("kv"):
        kv = linear(lc, x, [names.kv], None, "kv_proj")
        kv = _heads(lc, normalize(b, kv, lc.name(names.kv_norm), params, dims, "kv_norm", lc.layer.head_dim), 1)
        kv = b.op("Reshape", rotate_trailing(lc, kv, table, "kv_rope"), flat, name="kv_flat")
    return q, kv, kv


def rotated_back(lc: LayerContext, y: ir.Value, table: Table) -> ir.Value:
    """The attention output [B, S, N*D] with each head's trailing channels rotated by minus the query's angle."""
    flat = lc.b.const([0, 0, -1], "heads_flat", "int64")
    y = rotate_trailing(lc, _heads(lc, y, lc.dims.num_heads), table, "out_rope", inverse=True)
    return lc.b.op("Reshape", y, flat, name="out_rotated_back")


def grouped_output(lc: LayerContext, y: ir.Value) -> ir.Value:
    """o_b(concat_g(o_a_g(heads of group g))): [B, S, N*D] -> [B, S, H]."""
    b, dims, params = lc.b, lc.dims, lc.params
    names, shapes = lc.spec.shared_kv_attention, dims.shared_kv
    assert names is not None and shapes is not None
    groups, rank = shapes.groups, shapes.group_rank
    width = dims.num_heads * lc.layer.head_dim // groups
    name = lc.name(names.o_a)

    def per_group(w: np.ndarray) -> np.ndarray:  # [groups * rank, width] -> [groups, width, rank]
        return w.reshape(groups, rank, width).transpose(0, 2, 1)

    weight = b.initializer(name, params.derived(name, per_group, shape=(groups, width, rank)))
    grouped = b.op("Reshape", y, b.const([0, 0, groups, 1, width], "output_groups", "int64"))
    mixed = b.op("MatMul", grouped, weight, name="o_a_proj/MatMul")  # [B, S, G, 1, rank]
    mixed = b.op("Reshape", mixed, b.const([0, 0, groups * rank], "output_groups_flat", "int64"))
    return typed(linear(lc, mixed, [names.o_b], None, "o_b_proj"), params.dtype, [B, S, dims.hidden_size])


def shared_kv_block(lc: LayerContext, x: ir.Value, attention: Mixer) -> tuple[ir.Value, LayerKV | None]:
    """The attention on the normed input `x` through the grouped output projection."""
    with lc.b.scope("attn"):
        out, kv = attention(lc, x)
        return grouped_output(lc, out), kv
