"""RecurrentGemma's recurrent block: a gated branch beside a causal conv and the RG-LRU (Griffin's
real-gated linear recurrent unit), with two fixed-size states instead of a KV cache
(docs/hybrid-state.md §8.15).

    y        = gelu_tanh(linear_y(h))
    x        = conv_1d(linear_x(h)) + conv bias                  conv state: the last K - 1 inputs
    i, r     = sigmoid(x W_i + b_i), sigmoid(x W_r + b_r)       W_* block-diagonal over the heads
    log a    = -8 r softplus(recurrent_param)                  per channel
    x'       = x i sqrt(1 - a^2)       (x i at position 0: the reset)
    h_t      = a_t h_(t-1) + x'_t                               a scalar state per channel
    out      = linear_out(h * y)

The recurrence is com.microsoft.LinearAttention's `gated` rule with one state head per channel:
kv_num_heads = W, dk = dv = 1, one query and key head of width 1 that every state head reads (§3's
inverse-GQA mapping), v = x', the decay log a per head, scale 1; its state [W, 1, 1] per row is HF's
[W]. The reset's other half, a = 0 at position 0, multiplies a state that is zero there (genai starts
every state at zero, and a row's position 0 is its run's first real token), so the graph leaves it
out. The block-diagonal gates are one MatMul each over [B, S, heads, 1, W / heads] against the
stored [heads, W / heads, W / heads] weight (kept float by int4, as a 3-D MatMul weight).

Padding (§1.5): the conv input is zeroed at pad positions and the conv state ends at the row's last
token (recurrent_state.causal_conv); the query and key are attention_mask's column (1, or 0 at a pad)
and the decay is zeroed there, so the state passes a right-padded row's trailing padding unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import float_scalar, typed
from gqa_export.graph.recurrent_state import causal_conv, state_shapes, without_padding

B, S = "batch_size", "sequence_length"


def rglru(
    lc: LayerContext, x: ir.Value, past_conv: ir.Value, past_state: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the block's output [B, S, H] after linear_out, the new conv state, the new RG-LRU state)."""
    b, dims, params, dtype = lc.b, lc.dims, lc.params, lc.params.dtype
    r, padding = dims.rglru, lc.padding
    assert r is not None and lc.spec.mixers is not None and padding is not None and padding.first is not None
    names = lc.spec.mixers.rglru
    width = [B, S, r.width]
    gate_branch = activation(lc, linear(lc, x, [names.linear_y], None, "linear_y"))
    inputs = without_padding(lc, linear(lc, x, [names.linear_x], None, "linear_x"), "keep_conv_inputs")
    convolved, present_conv = causal_conv(lc, inputs, names.conv, past_conv, "none", "rglru")
    typed(convolved, dtype, width)

    input_gate = _block_gate(lc, convolved, names.input_gate, "input_gate")
    recurrent_gate = _block_gate(lc, convolved, names.recurrent_gate, "recurrent_gate")
    # log a = -8 r softplus(recurrent_param): the constant -8 softplus(c) [W] computed once, in fp32
    param = lc.name(names.recurrent_param, "")
    rate = b.initializer(f"{param}.log_decay_scale", params.derived(param, lambda v: -8.0 * np.logaddexp(0.0, v)))
    log_a = b.op("Mul", recurrent_gate, rate, name="log_a")
    a_square = b.op("Exp", b.op("Mul", log_a, float_scalar(b, 2.0, dtype, "two")), name="a_square")
    one = float_scalar(b, 1.0, dtype, "one")
    multiplier = b.op("Sqrt", b.op("Sub", one, a_square), name="sqrt_one_minus_a_square")
    # the reset: 1 instead of sqrt(1 - a^2) at position 0
    multiplier = b.op("Add", multiplier, b.op("Mul", padding.first, b.op("Sub", one, multiplier)), name="reset")
    values = b.op("Mul", b.op("Mul", convolved, input_gate, name="gated_x"), multiplier, name="normalized_x")
    decay = b.op("Mul", log_a, padding.keep, name="decay")  # exp(0) = 1 at a pad: the state passes unchanged
    states, present_state = b.op_multi(
        "LinearAttention",
        padding.keep, padding.keep, values, past_state, decay,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=1,
        kv_num_heads=r.width,
        update_rule="gated",
        scale=1.0,
        name="rg_lru",
    )  # fmt: skip
    typed(present_state, dtype, state_shapes(dims, "rglru")[1])
    gated = b.op("Mul", typed(states, dtype, width), gate_branch, name="times_y")
    y = typed(linear(lc, gated, [names.out_proj], None, "linear_out"), dtype, [B, S, dims.hidden_size])
    return y, present_conv, present_state


def _block_gate(lc: LayerContext, x: ir.Value, module: str, node: str) -> ir.Value:
    """sigmoid(x W + b) with W block-diagonal: each head's W / heads channels through its own
    [W / heads, W / heads] block (HF's baddbmm over the heads), as one broadcast MatMul."""
    b, r = lc.b, lc.dims.rglru
    assert r is not None
    weight_name, bias_name = lc.name(f"{module}_weight", ""), lc.name(f"{module}_bias", "")
    weight = b.initializer(weight_name, lc.params.tensor(weight_name))  # [heads, W / heads, W / heads]
    bias = b.initializer(bias_name, lc.params.flat([bias_name]))  # [W]
    blocks = b.op("Reshape", x, b.const([0, 0, r.heads, 1, r.block], f"{node}_blocks", "int64"))
    product = b.op("MatMul", blocks, weight, name=f"{node}/MatMul")  # [B, S, heads, 1, W / heads]
    flat = b.op("Reshape", product, b.const([0, 0, r.width], f"{node}_flat", "int64"))
    return typed(b.op("Sigmoid", b.op("Add", flat, bias), name=node), lc.params.dtype, [B, S, r.width])
