"""Zamba's Mamba (v1) mixer with heads (docs/hybrid-state.md §8.13): graph/mamba.py's layer, the I
channels split into h heads of P = I / h, each head with its own x_proj and dt_proj (stored as
stacked parameters, not Linears) and so its own B and C.

    x, z         = in_proj(h) rows interleaved per channel: row 2c is x_c, row 2c + 1 is z_c
    x            = silu(causal_conv(x) + conv bias)
    dt | B | C   = x_h @ x_proj_weight[h]^T                   per head: [R + 2N, P]
    dt           = softplus(dt @ dt_proj_weight[h]^T + dt_proj_bias[h])   per channel
    h_c          = exp(dt_c A_c) h_c + B_h dt_c x_c;  y_c = C_h . h_c + D_c x_c   c in head h
    out          = out_proj(y * silu(z))

The recurrence is Mamba's LinearAttention (one state head per channel, dv = 1) with h query/key heads
instead of one: its inverse-GQA mapping (state j reads key/query head j h / I) gives each head's P
consecutive channels their head's B and C. The interleaved in_proj is read as [x rows | z rows]
(a row selection of the stored weight, Params.matmul_rows); the per-head projections are one
batched MatMul over the heads."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import typed
from gqa_export.graph.recurrent_state import causal_conv, state_shapes, without_padding

B, S = "batch_size", "sequence_length"


def mamba_heads(
    lc: LayerContext, x: ir.Value, past_conv: ir.Value, past_ssm: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the mixer's output [B, S, H] after out_proj, the new conv state, the new SSM state)."""
    b, dims, params, dtype = lc.b, lc.dims, lc.params, lc.params.dtype
    m = dims.mamba
    assert m is not None and lc.spec.mixers is not None
    names = lc.spec.mixers.mamba
    heads, width, select = m.heads, m.inner // m.heads, m.dt_rank + 2 * m.state

    projected = _interleaved_in_proj(lc, without_padding(lc, x), names.in_proj, m.inner)
    xs, z = b.op_multi("Split", projected, b.const([m.inner, m.inner], "in_proj_split", "int64"), axis=-1,
                       outputs=2, name="split_x_z")  # fmt: skip
    convolved, present_conv = causal_conv(lc, xs, names.conv, past_conv, "silu", "mamba")
    typed(convolved, dtype, [B, S, m.inner])

    per_head = b.op("Reshape", convolved, b.const([0, 0, heads, 1, width], "head_rows", "int64"))
    x_proj = lc.name(names.x_proj, "")  # [h, R + 2N, P] -> [h, P, R + 2N]
    x_weight = b.initializer(x_proj, params.derived(x_proj, lambda v: v.transpose(0, 2, 1), (heads, width, select)))
    selective = b.op("MatMul", per_head, x_weight, name="x_proj")  # [B, S, h, 1, R + 2N]
    selective = b.op("Reshape", selective, b.const([0, 0, heads, select], "head_params", "int64"))
    sizes = b.const([m.dt_rank, m.state, m.state], "x_proj_split", "int64")
    dt, keys, queries = b.op_multi("Split", selective, sizes, axis=-1, outputs=3, name="split_dt_b_c")
    dt_proj = lc.name(names.dt_proj, "")  # [h, P, R] -> [h, R, P]
    dt_shape = (heads, m.dt_rank, width)
    dt_weight = b.initializer(dt_proj, params.derived(dt_proj, lambda v: v.transpose(0, 2, 1), dt_shape))
    dt = b.op("MatMul", b.op("Unsqueeze", dt, b.const([3], "rank_row", "int64")), dt_weight, name="dt_proj")
    flat = b.const([0, 0, m.inner], "inner_flat", "int64")
    assert names.dt_bias is not None
    dt_bias = lc.name(names.dt_bias, "")
    dt_bias_value = b.initializer(dt_bias, params.derived(dt_bias, lambda v: v.reshape(-1), (m.inner,)))
    dt = b.op("Softplus", b.op("Add", b.op("Reshape", dt, flat), dt_bias_value))
    dt = without_padding(lc, dt, name="dt")  # [B, S, I], zero at padding (§1.5)

    a_log = lc.name(names.a_log, "")  # [h, P, N] -> A = -exp(A_log) [I, N], in fp32
    decay_scale = b.initializer(
        f"{a_log.rpartition('.')[0]}.decay_scale",
        params.derived(a_log, lambda v: -np.exp(v).reshape(m.inner, m.state), (m.inner, m.state)),
    )
    per_key = b.op("Mul", b.op("Unsqueeze", dt, b.const([-1], "last", "int64")), decay_scale)  # [B, S, I, N]
    decay = b.op("Reshape", per_key, b.const([0, 0, m.inner * m.state], "decay_flat", "int64"), name="decay")
    keyed = b.const([0, 0, heads * m.state], "head_keys", "int64")
    core, present_ssm = b.op_multi(
        "LinearAttention",
        b.op("Reshape", queries, keyed), b.op("Reshape", keys, keyed), b.op("Mul", convolved, dt, name="dt_x"),
        past_ssm, decay,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=heads,
        kv_num_heads=m.inner,
        update_rule="gated",
        scale=1.0,
        name="ssm",
    )  # fmt: skip
    typed(present_ssm, dtype, state_shapes(dims, "mamba")[1])
    d_name = lc.name(names.d, "")
    d_skip = b.initializer(d_name, params.derived(d_name, lambda v: v.reshape(-1), (m.inner,)))
    y = b.op("Add", core, b.op("Mul", convolved, d_skip), name="d_skip")
    gated = b.op("Mul", y, b.op("Mul", z, b.op("Sigmoid", z)), name="silu_gate")
    y = typed(linear(lc, gated, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    return y, present_conv, present_ssm


def _interleaved_in_proj(lc: LayerContext, x: ir.Value, module: str, inner: int) -> ir.Value:
    """in_proj(x) as [x | z]: the stored rows alternate x_c, z_c per channel c (HF's view(..., -1, 2))."""
    b, params = lc.b, lc.params
    rows = [(2 * c, 2 * c + 1) for c in range(inner)] + [(2 * c + 1, 2 * c + 2) for c in range(inner)]
    name = lc.name(module)
    y = b.op("MatMul", x, b.initializer(name, params.matmul_rows(name, rows)), name="in_proj/MatMul")
    if lc.has(module, "bias"):
        bias = lc.name(module, "bias")
        y = b.op("Add", y, b.initializer(bias, params.vector_rows(bias, rows)), name="in_proj/Add")
    return y
