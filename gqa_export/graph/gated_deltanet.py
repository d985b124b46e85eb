"""A gated-DeltaNet layer: the token mixer of Qwen3.5's linear_attention layers, with two
fixed-size states instead of a KV cache (docs/hybrid-state.md §5).

    q | k | v = silu(causal_conv(in_proj_qkv(h)))     conv state: the last K - 1 projections
    q, k      = l2norm per key head (q also * dk^-0.5)
    beta      = sigmoid(in_proj_b(h)) (x 2 for OLMo-Hybrid),  g = -exp(A_log) * softplus(in_proj_a(h) + dt_bias)
                (per value head; per key channel for Kimi's KDA, graph/kda_gates.py)
    S         = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q     recurrent state [Hv, dk, dv]
    out       = out_proj(rms(o) * norm.weight * silu(in_proj_z(h)))   per value head (sigmoid for Kimi's KDA)

The convolution is com.microsoft.CausalConvWithState with its silu, channels-last (state
[B, K - 1, conv_dim]; docs/hybrid-state.md §2); the recurrence is com.microsoft.LinearAttention
with update_rule gated_delta, which does not normalise q or k itself, so the graph does, and which
maps each of the Hv state heads to key head j * Hk / Hv, HF's repeat_interleave (§3). Both ops ran
exactly against HF on CPU (§6.3). onnxruntime-genai's RecurrentState finds these layers by the
`past.N.recurrent` inputs and binds `past.N.conv` under the same index, both allocated as zeros
from the inputs' static dims (§1.1, §1.3).

Padding (§1.5): the input is zeroed at pad positions, as HF does, and beta and g are too, so a
right-padded row's state comes out of the prompt as it was at its last real token (HF itself lets
g decay the state over trailing padding); the conv state ends at that token.
Qwen3-Next stores the same projections fused per key head (in_proj_qkvz, in_proj_ba); their rows
are selected into the separate weights as they are streamed, so the graph is the same (§8.5).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.kda_gates import channel_decay, low_rank
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.recurrent_state import causal_conv, state_shapes, without_padding
from gqa_export.model.layer_kinds import DeltaNetDims

B, S = "batch_size", "sequence_length"
L2_EPS = 1e-6  # HF's l2norm(eps=1e-6) of q and k (the official builder's LpNormalization has none, §6.4)


def gated_deltanet(
    lc: LayerContext, x: ir.Value, past_conv: ir.Value, past_recurrent: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the mixer's output [B, S, H] after out_proj, the new conv state, the new recurrent state)."""
    b, dims, dtype = lc.b, lc.dims, lc.params.dtype
    d = dims.deltanet
    assert d is not None and lc.spec.mixers is not None
    names = lc.spec.mixers.gated_deltanet
    key_width, value_width = d.key_heads * d.key_dim, d.value_heads * d.value_dim
    recurrent_shape = state_shapes(dims, "gated_deltanet")[1]
    assert lc.padding is not None
    x = without_padding(lc, x)

    projection = _grouped_projection if names.qkvz else _projection
    mixed = projection(lc, x, "qkv")
    convolved, present_conv = causal_conv(lc, mixed, names.conv, past_conv, "silu", "gated_deltanet", names.conv_parts)
    sizes = b.const([key_width, key_width, value_width], "qkv_split", "int64")
    q, k, v = b.op_multi("Split", convolved, sizes, axis=-1, outputs=3, name="split_qkv")
    q = _l2_norm(b, q, d.key_heads, d.key_dim, float(d.key_dim) ** -0.5, dtype, "q")  # l2norm, then * dk^-0.5
    k = _l2_norm(b, k, d.key_heads, d.key_dim, 1.0, dtype, "k")

    beta = b.op("Sigmoid", projection(lc, x, "b"))
    if d.beta_scale != 1.0:  # OLMo-Hybrid's allow_neg_eigval: beta in [0, 2]
        beta = b.op("Mul", beta, b.const(np.array(d.beta_scale, NUMPY_DTYPES[dtype]), "beta_scale"), name="beta_scaled")
    a = projection(lc, x, "a")
    if names.decay == "per_channel":  # Kimi's KDA: one decay per key channel (graph/kda_gates.py)
        decay = channel_decay(lc, a)
    else:
        dt_bias = b.initializer(lc.name(names.dt_bias, ""), lc.params.vector([lc.name(names.dt_bias, "")]))
        a_log = lc.name(names.a_log, "")  # decay_scale = -exp(A_log), as HF computes it, in fp32
        scale = lc.params.derived(a_log, lambda v: -np.exp(v))
        decay_scale = b.initializer(f"{a_log.rpartition('.')[0]}.decay_scale", scale)
        decay = b.op("Mul", decay_scale, b.op("Softplus", b.op("Add", a, dt_bias)))  # log-space g
    # a pad position leaves the state as it is: decay exp(0) = 1 and no delta update (beta 0)
    beta = b.op("Mul", beta, lc.padding.keep, name="beta")
    decay = b.op("Mul", decay, lc.padding.keep, name="decay")

    core, present_recurrent = b.op_multi(
        "LinearAttention",
        q, k, v, past_recurrent, decay, beta,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=d.key_heads,
        kv_num_heads=d.value_heads,
        update_rule="gated_delta",
        scale=1.0,  # q carries dk^-0.5 already
        name="gated_delta",
    )  # fmt: skip
    typed(present_recurrent, dtype, recurrent_shape)

    heads = b.const([0, 0, d.value_heads, d.value_dim], "value_heads", "int64")
    z = b.op("Reshape", projection(lc, x, "z"), heads)
    norm_name = lc.name(names.norm)  # a plain w * rms(x) norm, not the layers' (1 + w)
    norm_weight = b.initializer(norm_name, lc.params.vector([norm_name]))
    normed = b.op(
        "SimplifiedLayerNormalization", b.op("Reshape", core, heads), norm_weight,
        axis=-1, epsilon=dims.rms_eps if names.norm_eps is None else names.norm_eps, stash_type=1, name="gated_norm",
    )  # fmt: skip
    if d.gate == "sigmoid":  # Kimi's KDA, Qwen4-Exp's output_gate_type sigmoid
        gated = b.op("Mul", normed, b.op("Sigmoid", z), name="sigmoid_gate")
    else:
        gated = b.op("Mul", normed, b.op("Mul", z, b.op("Sigmoid", z)), name="silu_gate")
    flat = b.op("Reshape", gated, b.const([0, 0, value_width], "value_flat", "int64"))
    y = typed(linear(lc, flat, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    return y, present_conv, present_recurrent


def _projection(lc: LayerContext, x: ir.Value, part: str) -> ir.Value:
    """in_proj_{part}(x) from its own checkpoint weight (Qwen3.5), qkv from the separate q, k and
    v weights concatenated (OLMo-Hybrid), a or z through a low-rank pair (Kimi's KDA)."""
    assert lc.spec.mixers is not None
    names = lc.spec.mixers.gated_deltanet
    if names.stacked is not None and lc.has(names.stacked):  # Lara: rows of one stacked in_proj
        assert lc.dims.deltanet is not None
        weight = lc.params.matmul_rows(lc.name(names.stacked), [stacked_rows(lc.dims.deltanet, part)])
        graph_weight = lc.b.initializer(lc.name(getattr(names, part)), weight)
        return lc.b.op("MatMul", x, graph_weight, name=f"in_proj_{part}/MatMul")
    if part == "qkv" and names.qkv_parts:  # one MatMul named after names.qkv
        return linear(lc, x, list(names.qkv_parts), names.qkv, "in_proj_qkv")
    parts = {"a": names.a_parts, "z": names.z_parts}.get(part)
    if parts is not None:  # Kimi's KDA: a low-rank pair of Linears (graph/kda_gates.py)
        return low_rank(lc, x, parts, f"in_proj_{part}")
    return linear(lc, x, [getattr(names, part)], None, f"in_proj_{part}")


def stacked_rows(d: DeltaNetDims, part: str) -> tuple[int, int]:
    """The row range of `part` (qkv, z, b or a) in one in_proj stacking q | k | v | z | b | a
    (GatedDeltaNetNames.stacked: Lara's hub files), as transformers' Split(dim=0) cuts it."""
    qkv = 2 * d.key_heads * d.key_dim + d.value_heads * d.value_dim
    z, hv = qkv + d.value_heads * d.value_dim, d.value_heads
    return {"qkv": (0, qkv), "z": (qkv, z), "b": (z, z + hv), "a": (z + hv, z + 2 * hv)}[part]


def grouped_rows(d: DeltaNetDims, part: str) -> list[tuple[int, int]]:
    """The row ranges of `part` (qkv, z, b or a) inside the projections fused per key head
    (GatedDeltaNetNames.qkvz / ba, docs/hybrid-state.md §8.5), in the order the separate weights
    hold them: all q rows (key head by key head), then all k, then all v; v, z, b and a rows of
    key head g belong to value heads g r ... g r + r - 1 (r = Hv / Hk), which is the layout the
    conv kernel, the recurrence and the gated norm already read."""
    r = d.value_heads // d.key_heads
    if part in ("b", "a"):  # ba: per key head, b (r) | a (r)
        first = 0 if part == "b" else r
        return [(g * 2 * r + first, g * 2 * r + first + r) for g in range(d.key_heads)]
    dk, vr = d.key_dim, r * d.value_dim
    group = 2 * dk + 2 * vr  # qkvz: per key head, q (dk) | k (dk) | v (r dv) | z (r dv)
    pieces = {"q": (0, dk), "k": (dk, 2 * dk), "v": (2 * dk, 2 * dk + vr), "z": (2 * dk + vr, group)}
    return [(g * group + lo, g * group + hi) for piece in part for g in range(d.key_heads)
            for lo, hi in (pieces[piece],)]  # fmt: skip


def _grouped_projection(lc: LayerContext, x: ir.Value, part: str) -> ir.Value:
    """in_proj_{part}(x) with its rows selected out of the fused per-key-head projection
    (Qwen3-Next); the weight is named after the separate projection it stands for."""
    assert lc.spec.mixers is not None and lc.dims.deltanet is not None
    names = lc.spec.mixers.gated_deltanet
    source = names.qkvz if part in ("qkv", "z") else names.ba
    assert source is not None
    weight = lc.params.matmul_rows(lc.name(source), grouped_rows(lc.dims.deltanet, part))
    graph_weight = lc.b.initializer(lc.name(getattr(names, part)), weight)
    return lc.b.op("MatMul", x, graph_weight, name=f"in_proj_{part}/MatMul")


def _l2_norm(
    b: GraphBuilder, x: ir.Value, heads: int, dim: int, scale: float, dtype: ir.DataType, name: str
) -> ir.Value:
    """scale * x * rsqrt(sum(x^2) + 1e-6) per head of x [B, S, heads * dim], as one fp32
    SimplifiedLayerNormalization: x * rsqrt(sum + eps) = dim^-0.5 * x * rsqrt(mean + eps / dim),
    so epsilon eps / dim and a constant weight scale * dim^-0.5."""
    per_head = b.op("Reshape", x, b.const([0, 0, heads, dim], f"{name}_heads", "int64"))
    weight = b.const(np.full(dim, scale * dim**-0.5, np.float32).astype(NUMPY_DTYPES[dtype]), f"{name}_l2_weight")
    normed = b.op(
        "SimplifiedLayerNormalization", per_head, weight,
        axis=-1, epsilon=L2_EPS / dim, stash_type=1, name=f"{name}_l2norm",
    )  # fmt: skip
    return b.op("Reshape", normed, b.const([0, 0, heads * dim], f"{name}_flat", "int64"))
