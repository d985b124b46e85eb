"""A Mamba2 layer: the token mixer of Granite-4.0-H's mamba layers and Nemotron-H's M layers, with
two fixed-size states instead of a KV cache (docs/hybrid-state.md §8.2, §8.6), and of Falcon-H1's
layers beside attention (§8.4).

    z | xBC | dt = in_proj(h)
    x | B | C    = silu(causal_conv(xBC) + conv bias)          conv state: the last K - 1 inputs
    dt           = softplus(dt + dt_bias),  A = -exp(A_log)   per head
    S            = exp(dt A) S + B (dt x)^T;  y = S^T C + D x  per head; B, C per group, state [Hm, N, P]
    out          = out_proj(w * rms_per_group(y * silu(z)))

Falcon-H1 normalizes before the gate, out_proj(w * rms_per_group(y) * silu(z)), or has no norm at
all, out_proj(y * silu(z)); its multipliers on in_proj and out_proj are the spec's (§8.4).

The recurrence is com.microsoft.LinearAttention's `gated` rule with q = C, k = B, v = dt x, a
per-head decay dt A in log space and scale 1 (§3): its key-major state [Hm, N, P] is HF's
[Hm, P, N] transposed, and its inverse-GQA mapping (state head j reads group j G / Hm) is HF's
repeat_interleave of B and C over consecutive heads. The D skip, the gate and the group-wise norm
are plain ops. The conv is com.microsoft.CausalConvWithState with its bias and silu,
channels-last (§2). onnxruntime-genai's RecurrentState finds these layers by their
`past.N.recurrent` inputs and binds `past.N.conv` under the same index (§1.1, §8.2).

Padding (§1.5): the input is zeroed at pad positions, as HF does, and so is dt, which holds the
SSM state over a right-padded row's trailing padding (HF lets it decay there); the conv state ends
at the row's last real token.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.recurrent_state import causal_conv, state_shapes, without_padding

B, S = "batch_size", "sequence_length"


def mamba2(
    lc: LayerContext, x: ir.Value, past_conv: ir.Value, past_ssm: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the mixer's output [B, S, H] after out_proj, the new conv state, the new SSM state)."""
    b, dims, dtype = lc.b, lc.dims, lc.params.dtype
    m = dims.mamba2
    assert m is not None and lc.spec.mixers is not None
    names = lc.spec.mixers.mamba2
    ssm_shape = state_shapes(dims, "mamba2")[1]
    group_width = m.groups * m.state

    projected = linear(lc, without_padding(lc, x), [names.in_proj], None, "in_proj")
    sizes = b.const([m.inner, m.conv_channels, m.heads], "in_proj_split", "int64")
    z, xbc, dt = b.op_multi("Split", projected, sizes, axis=-1, outputs=3, name="split_z_xbc_dt")
    convolved, present_conv = causal_conv(lc, xbc, names.conv, past_conv, "silu", "mamba2")
    sizes = b.const([m.inner, group_width, group_width], "xbc_split", "int64")
    xs, keys, queries = b.op_multi("Split", convolved, sizes, axis=-1, outputs=3, name="split_x_b_c")

    dt_bias = b.initializer(lc.name(names.dt_bias, ""), lc.params.vector([lc.name(names.dt_bias, "")]))
    dt = b.op("Softplus", b.op("Add", dt, dt_bias))  # [B, S, Hm]
    if m.prompt_dt_floor > 0:  # HF clamps dt in its chunked (prompt) form only (§8.2, §8.6)
        assert lc.prompt_step is not None
        floor = b.const(np.asarray(m.prompt_dt_floor, NUMPY_DTYPES[dtype]), "dt_floor")
        dt = b.op("Where", lc.prompt_step, b.op("Max", dt, floor), dt, name="prompt_dt_floor")
    if m.prompt_dt_ceiling < float("inf"):  # and from above, time_step_limit's max (§8.2)
        assert lc.prompt_step is not None
        ceiling = b.const(np.asarray(m.prompt_dt_ceiling, NUMPY_DTYPES[dtype]), "dt_ceiling")
        dt = b.op("Where", lc.prompt_step, b.op("Min", dt, ceiling), dt, name="prompt_dt_ceiling")
    # 0 at pad positions: decay exp(0) = 1 and v = dt x = 0 leave the state as it is
    dt = without_padding(lc, dt, name="dt")
    a_log = lc.name(names.a_log, "")  # decay_scale = A = -exp(A_log), as HF computes it, in fp32
    decay_scale = b.initializer(
        f"{a_log.rpartition('.')[0]}.decay_scale", lc.params.derived(a_log, lambda v: -np.exp(v))
    )
    decay = b.op("Mul", dt, decay_scale, name="decay")  # log-space per-head decay dt A

    heads = b.const([0, 0, m.heads, m.head_dim], "heads", "int64")
    flat = b.const([0, 0, m.inner], "inner_flat", "int64")
    x_heads = b.op("Reshape", xs, heads)
    values = b.op("Reshape", b.op("Mul", x_heads, b.op("Unsqueeze", dt, b.const([-1], "last", "int64"))), flat)
    core, present_ssm = b.op_multi(
        "LinearAttention",
        queries, keys, values, past_ssm, decay,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=m.groups,
        kv_num_heads=m.heads,
        update_rule="gated",
        scale=1.0,
        name="ssm",
    )  # fmt: skip
    typed(present_ssm, dtype, ssm_shape)
    d_name = lc.name(names.d, "")
    d_skip = b.initializer(d_name, lc.params.derived(d_name, lambda v: v.reshape(-1, 1), (m.heads, 1)))  # [Hm, 1]
    y = b.op("Add", core, b.op("Reshape", b.op("Mul", x_heads, d_skip), flat), name="d_skip")

    silu_z = b.op("Mul", z, b.op("Sigmoid", z))
    if not lc.has(names.norm):  # no gated norm in the checkpoint (Falcon-H1's mamba_rms_norm off): y * silu(z)
        mixed = b.op("Mul", y, silu_z, name="silu_gate")
    elif m.norm_before_gate:  # Falcon-H1: w * rms_per_group(y), then * silu(z)
        mixed = b.op("Mul", _group_norm(lc, y, flat), silu_z, name="silu_gate")
    else:  # Granite-4.0-H: w * rms_per_group(y * silu(z))
        mixed = _group_norm(lc, b.op("Mul", y, silu_z, name="silu_gate"), flat)
    y = typed(linear(lc, mixed, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    return y, present_conv, present_ssm


def _group_norm(lc: LayerContext, x: ir.Value, flat: ir.Value) -> ir.Value:
    """The gated norm's RMSNorm of x [B, S, I] over each group's I / G channels, times its weight [I]
    (`flat`: the shape [0, 0, I] back)."""
    b, m, dtype = lc.b, lc.dims.mamba2, lc.params.dtype
    assert m is not None and lc.spec.mixers is not None
    group_size = m.inner // m.groups
    per_group = b.op("Reshape", x, b.const([0, 0, m.groups, group_size], "groups", "int64"))
    ones = b.const(np.ones(group_size, NUMPY_DTYPES[dtype]), "unit_weight")
    eps = m.norm_eps if m.norm_eps is not None else lc.dims.rms_eps
    normed = b.op(
        "SimplifiedLayerNormalization", per_group, ones, axis=-1, epsilon=eps, stash_type=1,
        name="gated_norm",
    )  # fmt: skip
    norm_name = lc.name(lc.spec.mixers.mamba2.norm)
    norm_weight = b.initializer(norm_name, lc.params.vector([norm_name]))
    return b.op("Mul", b.op("Reshape", normed, flat), norm_weight, name="norm_weight")


def prompt_step(b: GraphBuilder, input_ids: ir.Value, attention_mask: ir.Value) -> ir.Value:
    """A bool [1]: this run is one HF computes in its chunked Mamba2 form, i.e. more than one new
    token, or as many as the attention mask is long (no past). A single-token step after a past
    is HF's recurrent form, which applies no dt floor (docs/hybrid-state.md §8.6)."""
    with b.scope("prompt_step"):
        new = b.op("Shape", input_ids, start=1, end=2)
        total = b.op("Shape", attention_mask, start=1, end=2)
        several = b.op("Greater", new, b.const([1], "one", "int64"))
        return b.op("Or", several, b.op("Equal", new, total), name="is_prompt")
