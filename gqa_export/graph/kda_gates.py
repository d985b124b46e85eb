"""Kimi Delta Attention's departures from the gated DeltaNet (Kimi-Linear's linear_attention layers,
docs/hybrid-state.md §8.17), each a named mechanism of GatedDeltaNetNames that graph/gated_deltanet.py
calls where the spec asks for it:

    a, z      = f_b(f_a(h)), g_b(g_a(h))             low-rank pairs (a_parts, z_parts), two MatMuls as HF runs them
    g         = -exp(A_log_h) * softplus(a + dt_bias)  per KEY CHANNEL (decay "per_channel"): [B, S, Hv dk]
    g         = bound * sigmoid(exp(A_log_h) * (a + dt_bias))   the bounded form (Ling 3's kda_safe_gate,
                                                     MixerSpec.bounded_decay): g in (bound, 0)
    out gate  = rms(o) * norm.weight * sigmoid(z)     (gate "sigmoid"; Qwen3.5's is silu)

The per-channel decay is the form com.microsoft.LinearAttention takes as `decay` [B, T, Hkv dk] (one
log-decay per key dimension of each state head, docs/hybrid-state.md §3): the state S [dk, dv] of a head
is scaled row by row, exp(g_c) S[c, :], which is HF's `state * g.exp()[..., None]`. A_log [1, 1, Hv, 1]
is shared by a head's dk channels: -exp(A_log) is computed in fp32 at export, as HF computes it, and
written repeated dk times (exp(A_log) for the bounded form, the bound a constant after the sigmoid, in
HF's order)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.params import NUMPY_DTYPES


def low_rank(lc: LayerContext, x: ir.Value, parts: tuple[str, str], node: str) -> ir.Value:
    """parts[1](parts[0](x)): a Linear through a narrow one (KDA's f_a / f_b and g_a / g_b; no biases)."""
    inner = linear(lc, x, [parts[0]], None, f"{node}_a")
    return linear(lc, inner, [parts[1]], None, f"{node}_b")


def channel_decay(lc: LayerContext, a: ir.Value) -> ir.Value:
    """The log-space decay [B, S, Hv dk]: -exp(A_log_h) * softplus(a + dt_bias), or where the layer's
    gate is bounded (DeltaNetDims.decay_bound) bound * sigmoid(exp(A_log_h) * (a + dt_bias)), A_log
    per head repeated over the head's dk key channels, a and dt_bias per channel."""
    b, d = lc.b, lc.dims.deltanet
    assert d is not None and lc.spec.mixers is not None
    names = lc.spec.mixers.gated_deltanet
    dt_name, a_log = lc.name(names.dt_bias, ""), lc.name(names.a_log, "")
    dt_bias = b.initializer(dt_name, lc.params.vector([dt_name]))
    width = d.value_heads * d.key_dim

    sign = 1.0 if d.decay_bound is not None else -1.0

    def per_channel(v: np.ndarray) -> np.ndarray:
        return np.repeat(sign * np.exp(v.reshape(-1)), d.key_dim).astype(np.float32)

    scale = lc.params.derived(a_log, per_channel, (width,))
    if d.decay_bound is not None:  # Ling 3: bound * sigmoid(exp(A_log) * (a + dt_bias))
        rate = b.initializer(f"{a_log.rpartition('.')[0]}.decay_rate", scale)
        gate = b.op("Sigmoid", b.op("Mul", rate, b.op("Add", a, dt_bias)), name="bounded_gate")
        bound = b.const(np.asarray(d.decay_bound, NUMPY_DTYPES[lc.params.dtype]), "decay_bound")
        return b.op("Mul", gate, bound, name="channel_decay")
    decay_scale = b.initializer(f"{a_log.rpartition('.')[0]}.decay_scale", scale)
    return b.op("Mul", decay_scale, b.op("Softplus", b.op("Add", a, dt_bias)), name="channel_decay")
