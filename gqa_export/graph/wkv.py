"""RWKV-4's WKV recurrence as an ONNX Scan over the run's tokens, step for step HF's CPU loop
(`rwkv_linear_attention_cpu`, docs/hybrid-state.md §8.18), in float32 whatever the graph's dtype:

    per channel c, with w = -exp(time_decay), u = time_first and the state (num, den, max):
    m   = max(max, k_t + u);  y_t = (e^(max-m) num + e^(k_t+u-m) v_t) / (e^(max-m) den + e^(k_t+u-m))
    m'  = max(max + w, k_t);  num = e^(max+w-m') num + e^(k_t-m') v_t;  den = e^(max+w-m') den + e^(k_t-m');
    max = m'

The running max keeps every exponent at or below zero, so no key overflows exp (what a
LinearAttention form over exp(k) could not promise); the time_first bonus reaches the current token
only. onnxruntime-genai starts the state at zeros; HF starts max at -1e30. With num = den = 0 the
two give the same y_t, but the zero max would keep e^(k_t - m') below 1 and underflow a very negative
key, so a state whose den is 0 (nothing seen yet: after any token den >= 1, one of the two exponents
being 0) starts at HF's -1e30. A padded position (keep false) passes the state through unchanged,
so a right-padded row's state is the one after its last real token (§1.5).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.params import WIDER_THAN_IO_META, Params

B, S = "batch_size", "sequence_length"
FLOAT = ir.DataType.FLOAT
EMPTY_MAX = -1e30  # HF's initial max state (RwkvModel.forward with use_cache)


def wkv(
    lc: LayerContext, key: ir.Value, value: ir.Value, keep: ir.Value, past: ir.Value, decay: str, first: str
) -> tuple[ir.Value, ir.Value]:
    """(the WKV output [B, S, C] in the graph's dtype, the new state [B, 3, C] float32) for keys and
    values [B, S, C], keep [B, S, 1] bool, the past state [B, 3, C] (num | den | max, float32) and the
    checkpoint's time_decay and time_first [C] (module names relative to the layer)."""
    b, dtype = lc.b, lc.params.dtype
    channels = lc.dims.rwkv.channels  # type: ignore[union-attr]
    fp32 = Params(lc.params.store, FLOAT)  # HF keeps time_decay and time_first in float32
    decay_name, first_name = lc.name(decay, ""), lc.name(first, "")
    w = _kept(lc, b.initializer(f"{decay_name}.neg_exp", fp32.derived(decay_name, lambda v: -np.exp(v))))
    u = _kept(lc, b.initializer(first_name, fp32.vector([first_name])))
    if dtype != FLOAT:
        key, value = (b.op("Cast", t, to=FLOAT, name=f"{n}_fp32") for t, n in ((key, "key"), (value, "value")))
    num, den, top = b.op_multi("Split", past, b.const([1, 1, 1], "wkv_state_split", "int64"), axis=1, outputs=3)
    axis = b.const([1], "wkv_state_axis", "int64")
    num, den, top = (b.op("Squeeze", t, axis) for t in (num, den, top))  # [B, C] each
    fresh = b.op("Equal", den, _kept(lc, b.const(np.float32(0), "zero_den")))
    top = b.op("Where", fresh, _kept(lc, b.const(np.float32(EMPTY_MAX), "empty_max")), top, name="initial_max")
    bonus = b.op("Add", key, u, name="key_first")  # k_t + u, outside the loop
    body = _step_body(lc, channels)
    outs = b.op_multi(
        "Scan", w, num, den, top, key, bonus, value, keep,
        body=body, num_scan_inputs=4, scan_input_axes=[1, 1, 1, 1], scan_output_axes=[1], outputs=5, name="wkv_scan",
    )  # fmt: skip
    _, num, den, top, y = outs
    state = b.op("Concat", *(b.op("Unsqueeze", t, axis) for t in (num, den, top)), axis=1, name="wkv_state")
    typed(state, FLOAT, [B, 3, channels])
    if dtype != FLOAT:
        y = b.op("Cast", y, to=dtype, name="wkv_output")
    return typed(y, dtype, [B, S, channels]), state


def _kept(lc: LayerContext, value: ir.Value) -> ir.Value:
    """A float32 initializer kept so in a half-precision graph (quant/quantize.py leaves it)."""
    if lc.params.dtype != FLOAT:
        value.meta[WIDER_THAN_IO_META] = True
    return value


def _step_body(lc: LayerContext, channels: int) -> ir.Graph:
    """One token of the recurrence: state (w, num, den, max) and scan inputs (k_t, k_t + u, v_t,
    keep_t) in; the state and y_t out. w rides along as a state carried unchanged, so the body reads
    nothing from the outer graph."""
    s = GraphBuilder(f"wkv_step_{lc.i}", {})
    tag = f"layers.{lc.i}"
    with s.scope(tag), s.scope("wkv_step"):

        def inp(name: str, shape: list[int | str], dtype: ir.DataType = FLOAT) -> ir.Value:
            return s.input(f"{tag}.wkv_{name}", dtype, shape)

        w = inp("w", [channels])
        num, den, top = inp("num", [B, channels]), inp("den", [B, channels]), inp("max", [B, channels])
        key, bonus, value = inp("k", [B, channels]), inp("ku", [B, channels]), inp("v", [B, channels])
        keep = inp("keep", [B, 1], ir.DataType.BOOL)
        # the output at t: the state plus the current token with its time_first bonus
        m = s.op("Max", top, bonus, name="out_max")
        e1 = s.op("Exp", s.op("Sub", top, m), name="out_e1")
        e2 = s.op("Exp", s.op("Sub", bonus, m), name="out_e2")
        numerator = s.op("Add", s.op("Mul", e1, num), s.op("Mul", e2, value), name="out_num")
        denominator = s.op("Add", s.op("Mul", e1, den), e2, name="out_den")
        y = s.op("Div", numerator, denominator, name="y")
        # the state after t: decayed by w, plus the current token without the bonus
        decayed = s.op("Add", top, w, name="decayed_max")
        m2 = s.op("Max", decayed, key, name="state_max")
        f1 = s.op("Exp", s.op("Sub", decayed, m2), name="state_e1")
        f2 = s.op("Exp", s.op("Sub", key, m2), name="state_e2")
        new_num = s.op("Add", s.op("Mul", f1, num), s.op("Mul", f2, value), name="state_num")
        new_den = s.op("Add", s.op("Mul", f1, den), f2, name="state_den")
        outs = [
            s.op("Identity", w, name="w_out"),
            s.op("Where", keep, new_num, num, name="num_out"),
            s.op("Where", keep, new_den, den, name="den_out"),
            s.op("Where", keep, m2, top, name="max_out"),
            s.op("Identity", y, name="y_out"),
        ]
        for value_out, shape in zip(outs, [[channels]] + [[B, channels]] * 4, strict=True):
            typed(value_out, FLOAT, shape)
            s.graph.outputs.append(value_out)
    return s.graph
