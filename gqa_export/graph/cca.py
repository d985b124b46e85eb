"""Compressed convolutional attention's projections (ZAYA1's CCA, docs/coverage.md's ZAYA section):
GroupQueryAttention's query, key and value computed with two states carried beside the KV cache.

- q|k: the q and k projections, concatenated per token, run through a causal depthwise Conv1d
  (kernel k0, one group per channel) and then a grouped Conv1d (kernel k1, one group per query and
  per key head: it mixes a head's channels over k1 steps). HF left-pads the first run with
  (k0 - 1) + (k1 - 1) zeros and keeps the last that many inputs as the conv state; the graph
  convolves concat(past, run) (channels-first, ONNX Conv with `group`: the grouped kernel is no
  depthwise one, which CausalConvWithState runs) and gathers the new state at each row's last real
  token (graph/recurrent_state.causal_conv's right-padding rule, docs/hybrid-state.md §1.5).
- residual paths added after the convolutions: the query gets (q + its kv head's k) / 2, the key
  the mean of that over its group of query heads.
- the value: [current projection | the previous token's delayed projection]; the delayed
  projection of the row's last real token is the recurrent state (zeros before the first token,
  what HF's v_proj_delayed of a zero input is without a bias).
- the q/k norm: each head L2-normalized to sqrt(head_dim) (the norm clamped at the dtype's eps),
  keys times a learned per-kv-head temperature. RoPE and attention follow in GroupQueryAttention.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.mixer_spec import CcaNames
from gqa_export.errors import InputError
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import typed
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.recurrent_state import state_shapes
from gqa_export.graph.rotary import rotate


def cca_names(lc: LayerContext) -> CcaNames:
    assert lc.spec.mixers is not None
    return lc.spec.mixers.cca


def cca_qkv(
    lc: LayerContext, x: ir.Value, table: tuple[ir.Value, ir.Value] | None = None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(query [B,S,Nq*D], key [B,S,Nkv*D], value [B,S,Nkv*D]) for GroupQueryAttention; the layer's
    new conv and recurrent states go to lc.state_io's presents. `table`: (cos, sin) where RoPE runs
    as plain ops before GroupQueryAttention (a rotary dim its fused RoPE cannot take), None where
    GroupQueryAttention rotates."""
    assert lc.state_io is not None
    (past_conv, past_value), presents = lc.state_io
    names, b, layer = cca_names(lc), lc.b, lc.layer
    heads, kv_heads, d = lc.dims.num_heads, layer.num_kv_heads, layer.head_dim
    if lc.has(names.value_delayed, "bias"):  # HF's first delayed value is then the bias, genai's state zeros
        raise InputError(
            f"{lc.spec.name}: v_proj_delayed has a bias (attention_bias), whose value HF feeds the first token as "
            "its delayed value; the recurrent state starts at zeros, so export a checkpoint without attention_bias"
        )
    attention = names.q.rpartition(".")[0]
    qk = linear(lc, x, [names.q, names.k], f"{attention}.qk_proj", "qk_proj")  # [B,S,(Nq+Nkv)*D]
    q_width, k_width = heads * d, kv_heads * d
    q, k = b.op_multi("Split", qk, b.const([q_width, k_width], "qk_split", "int64"), axis=-1, outputs=2)
    query_residual, key_residual = _residual_paths(lc, q, k)
    convolved, conv_state = _qk_convolutions(lc, qk, past_conv)
    q_conv, k_conv = b.op_multi("Split", convolved, b.const([q_width, k_width], "conv_split", "int64"), axis=-1,
                                outputs=2, name="conv_qk_split")  # fmt: skip
    query = b.op("Add", q_conv, query_residual, name="query")
    key = b.op("Add", k_conv, key_residual, name="key")
    value, value_state = _delayed_value(lc, x, past_value)
    presents[lc.i] = (conv_state, value_state)
    query, key = qk_l2_norm(lc, query, key, table)
    return query, key, value


def _residual_paths(lc: LayerContext, q: ir.Value, k: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(q + repeat_kv(k)) / 2 flattened [B,S,Nq*D], and its mean over each kv head's query group [B,S,Nkv*D]."""
    b, layer = lc.b, lc.layer
    kv_heads, d = layer.num_kv_heads, layer.head_dim
    group = lc.dims.num_heads // kv_heads
    with b.scope("residual_paths"):
        q5 = b.op("Reshape", q, b.const([0, 0, kv_heads, group, d], "query_groups", "int64"))
        k5 = b.op("Reshape", k, b.const([0, 0, kv_heads, 1, d], "key_groups", "int64"))
        half = b.const(np.asarray(0.5, NUMPY_DTYPES[lc.params.dtype]), "half")
        mixed = b.op("Mul", b.op("Add", q5, k5), half, name="query_residual")  # [B,S,Nkv,g,D]
        key = b.op("ReduceMean", mixed, b.const([3], "group_axis", "int64"), keepdims=0, name="key_residual")
        flat = b.const([0, 0, -1], "flat", "int64")
        return b.op("Reshape", mixed, flat), b.op("Reshape", key, flat)


def _qk_convolutions(lc: LayerContext, qk: ir.Value, past: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The depthwise then grouped causal convolutions over concat(past, run) channels-first; returns
    (their output [B,S,C], the new conv state [B,C,K] gathered at each row's last real token)."""
    names, b, params = cca_names(lc), lc.b, lc.params
    assert lc.padding is not None
    state_shape = state_shapes(lc.dims, "cca")[0]
    channels, width = int(state_shape[1]), int(state_shape[2])
    groups = lc.dims.num_heads + lc.layer.num_kv_heads
    with b.scope("conv_qk"):
        history = b.op("Concat", past, b.op("Transpose", qk, perm=[0, 2, 1]), axis=2, name="past_and_run")
        x = history
        for module, group in ((names.depthwise, channels), (names.grouped, groups)):
            weight = b.initializer(lc.name(module), params.tensor(lc.name(module)))
            bias = b.initializer(lc.name(module, "bias"), params.vector([lc.name(module, "bias")]))
            x = b.op("Conv", x, weight, bias, group=group, name=module.rpartition(".")[2])
        present = b.op(
            "GatherElements", history, lc.padding.conv_state_index(b, width, channels), axis=2, name="conv_state"
        )
        typed(present, params.dtype, state_shape)
        return b.op("Transpose", x, perm=[0, 2, 1], name="conv_out"), present


def _delayed_value(lc: LayerContext, x: ir.Value, past: ir.Value) -> tuple[ir.Value, ir.Value]:
    """[v_current | the previous token's v_delayed] [B,S,Nkv*D], and the state: v_delayed at each
    row's last real token [B,1,Nkv*D/2]."""
    names, b = cca_names(lc), lc.b
    assert lc.padding is not None
    current = linear(lc, x, [names.value_current], None, "v_proj_current")
    delayed = linear(lc, x, [names.value_delayed], None, "v_proj_delayed")
    with b.scope("delayed_value"):
        history = b.op("Concat", past, delayed, axis=1, name="past_and_run")  # [B,1+S,V/2]
        shifted = b.op(
            "Slice", history, b.const([0], "start", "int64"), b.const([-1], "stop", "int64"),
            b.const([1], "axis", "int64"), name="previous_tokens",
        )  # fmt: skip
        present = b.op("GatherND", history, lc.padding.conv_state_index(b, 1), batch_dims=1, name="value_state")
        typed(present, lc.params.dtype, state_shapes(lc.dims, "cca")[1])
        return b.op("Concat", current, shifted, axis=-1, name="value"), present


def qk_l2_norm(
    lc: LayerContext, query: ir.Value, key: ir.Value, table: tuple[ir.Value, ir.Value] | None = None
) -> tuple[ir.Value, ir.Value]:
    """Each head times sqrt(D) / max(||head||, eps) (eps the dtype's machine epsilon, as HF's
    clamp_min), keys then times the layer's per-kv-head temperature; then RoPE by `table` where given."""
    names, b, params, layer = cca_names(lc), lc.b, lc.params, lc.layer
    dtype = NUMPY_DTYPES[params.dtype]
    d = layer.head_dim
    with b.scope("qk_norm"):
        scale = b.const(np.asarray(np.sqrt(d), dtype), "head_dim_scale")
        eps = b.const(np.asarray(np.finfo(dtype).eps, dtype), "eps")
        out = []
        for value, heads, tag in ((query, lc.dims.num_heads, "q"), (key, layer.num_kv_heads, "k")):
            per_head = b.op("Reshape", value, b.const([0, 0, heads, d], f"{tag}_heads", "int64"))
            norm = b.op("ReduceL2", per_head, b.const([-1], "last", "int64"), keepdims=1, name=f"{tag}_l2")
            y = b.op("Mul", per_head, b.op("Div", scale, b.op("Max", norm, eps)), name=f"{tag}_normed")
            if tag == "k":
                temp_name = lc.name(names.temperature, suffix="")
                temps = params.derived(temp_name, lambda t: t.reshape(-1, 1), shape=(heads, 1))  # [Nkv, 1]
                temp = b.initializer(temp_name, temps)
                y = b.op("Mul", y, temp, name="k_temperature")
            if table is not None:
                rope = lc.dims.ropes[layer.rope]  # type: ignore[index]
                y = rotate(b, y, table[0], table[1], rope, d, f"{tag}_rope")
            out.append(b.op("Reshape", y, b.const([0, 0, heads * d], f"{tag}_flat", "int64")))
        return out[0], out[1]
