"""A Mamba (v1) layer: the token mixer of Jamba's mamba layers and of every layer of Mamba and
Falcon-Mamba, with two fixed-size states instead of a KV cache (docs/hybrid-state.md §8.3, §8.11).

    x | z        = in_proj(h)
    x            = silu(causal_conv(x) + conv bias)              conv state: the last K - 1 inputs
    dt | B | C   = x_proj(x);  each through its own RMSNorm     (Jamba's dt/b/c_layernorm; Falcon-Mamba's
                                                                 have no weight; Mamba has none)
    dt           = softplus(dt_proj(dt)),  A = -exp(A_log)      dt per channel [I], A per channel and state [I, N]
    h_c          = exp(dt_c A_c) * h_c + B dt_c x_c;  y_c = C . h_c + D_c x_c     per channel c, state [I, N]
    out          = out_proj(y * silu(z))

The recurrence is com.microsoft.LinearAttention's `gated` rule with one state head per channel:
kv_num_heads = I, dk = N, dv = 1, a single key and query head (B and C, shared by every channel),
v = dt x and the decay in log space given per key dimension, dt_c A_c (§3: the op takes a decay
[B, T, heads * dk] as well as one per head). Its key-major state [I, N, 1] is HF's [I, N] with a unit
value axis. The D skip and the gate are plain ops. The conv is com.microsoft.CausalConvWithState with
its bias and silu, channels-last (§2); onnxruntime-genai's RecurrentState finds these layers by their
`past.N.recurrent` inputs and binds `past.N.conv` under the same index (§1.1). Padding (§1.5): the
input and dt are zeroed at pad positions, which holds the SSM state over a right-padded row's
trailing padding; the conv state ends at the row's last token (recurrent_state.causal_conv).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import typed
from gqa_export.graph.mamba_heads import mamba_heads
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.recurrent_state import causal_conv, state_shapes, without_padding

B, S = "batch_size", "sequence_length"


def mamba(
    lc: LayerContext, x: ir.Value, past_conv: ir.Value, past_ssm: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the mixer's output [B, S, H] after out_proj, the new conv state, the new SSM state)."""
    b, dims, params, dtype = lc.b, lc.dims, lc.params, lc.params.dtype
    m = dims.mamba
    assert m is not None and lc.spec.mixers is not None
    names = lc.spec.mixers.mamba
    if names.per_head:  # Zamba: heads with their own x_proj and dt_proj (graph/mamba_heads.py)
        return mamba_heads(lc, x, past_conv, past_ssm)

    projected = linear(lc, without_padding(lc, x), [names.in_proj], None, "in_proj")
    halves = b.const([m.inner, m.inner], "in_proj_split", "int64")
    xs, z = b.op_multi("Split", projected, halves, axis=-1, outputs=2, name="split_x_z")
    convolved, present_conv = causal_conv(lc, xs, names.conv, past_conv, "silu", "mamba")
    typed(convolved, dtype, [B, S, m.inner])

    selective = linear(lc, convolved, [names.x_proj], None, "x_proj")
    sizes = b.const([m.dt_rank, m.state, m.state], "x_proj_split", "int64")
    dt, keys, queries = b.op_multi("Split", selective, sizes, axis=-1, outputs=3, name="split_dt_b_c")
    dt = _dt_bc_norm(lc, dt, names.dt_norm, "dt_layernorm", m.dt_rank)
    keys = _dt_bc_norm(lc, keys, names.b_norm, "b_layernorm", m.state)
    queries = _dt_bc_norm(lc, queries, names.c_norm, "c_layernorm", m.state)
    # [B, S, I], zero at padding: the state decays by exp(0) and gains nothing there (§1.5)
    dt = without_padding(lc, b.op("Softplus", linear(lc, dt, [names.dt_proj], None, "dt_proj")), name="dt")

    a_log = lc.name(names.a_log, "")  # decay_scale = A = -exp(A_log) [I, N], as HF computes it, in fp32
    decay_scale = b.initializer(f"{a_log.rpartition('.')[0]}.decay_scale", params.derived(a_log, lambda v: -np.exp(v)))
    per_key = b.op("Mul", b.op("Unsqueeze", dt, b.const([-1], "last", "int64")), decay_scale)  # [B, S, I, N]
    decay = b.op("Reshape", per_key, b.const([0, 0, m.inner * m.state], "decay_flat", "int64"), name="decay")
    values = b.op("Mul", convolved, dt, name="dt_x")
    core, present_ssm = b.op_multi(
        "LinearAttention",
        queries, keys, values, past_ssm, decay,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=1,
        kv_num_heads=m.inner,
        update_rule="gated",
        scale=1.0,
        name="ssm",
    )  # fmt: skip
    typed(present_ssm, dtype, state_shapes(dims, "mamba")[1])
    d_name = lc.name(names.d, "")
    d_skip = b.initializer(d_name, params.vector([d_name]))
    y = b.op("Add", core, b.op("Mul", convolved, d_skip), name="d_skip")
    gated = b.op("Mul", y, b.op("Mul", z, b.op("Sigmoid", z)), name="silu_gate")
    y = typed(linear(lc, gated, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    return y, present_conv, present_ssm


def _dt_bc_norm(lc: LayerContext, x: ir.Value, module: str, name: str, width: int) -> ir.Value:
    """The RMSNorm on dt, B or C by the spec's MixerSpec.mamba_dt_bc_norm: Jamba's stored weight
    (the model's norm and eps), Falcon-Mamba's without weight at the mixer's own eps (F.rms_norm's
    x * rsqrt(mean(x^2) + eps), computed in fp32), or none (Mamba)."""
    b, m = lc.b, lc.dims.mamba
    assert m is not None
    if m.dt_bc_norm == "none":
        return x
    if m.dt_bc_norm == "weighted":
        return normalize(b, x, lc.name(module), lc.params, lc.dims, name, width)
    ones = b.const(np.ones(width, NUMPY_DTYPES[lc.params.dtype]), f"{name}_ones")
    out = b.op("SimplifiedLayerNormalization", x, ones, axis=-1, epsilon=m.dt_bc_norm_eps, stash_type=1, name=name)
    return typed(out, lc.params.dtype, [B, S, width])
