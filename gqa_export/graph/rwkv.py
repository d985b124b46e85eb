"""An RWKV-4 block (HF's RwkvBlock, docs/hybrid-state.md §8.18): the whole layer, since both of its
halves carry state.

    x  = ln1(h);   x_prev = the previous token's x (token shift)
    k, v, r = key(mix_k), value(mix_v), sigmoid(receptance(mix_r)),   mix_* = x m_* + x_prev (1 - m_*)
    h  = h + output(r * WKV(k, v)) / 2^(i // rescale_every)              (graph/wkv.py)
    x  = ln2(h);   x_prev likewise, its own shift state
    h  = h + sigmoid(receptance(mix_r)) * value(relu(key(mix_k))^2) / 2^(i // rescale_every)
    h  = h / 2 after every rescale_every-th block

The token shift reads concat(past, x) one row back; its new state is the row of the run's last real
token, gathered per row (a right-padded row's trailing padding never becomes its state, §1.5). The
two shift states travel as one [B, 2, H] state (`past.N.conv`: time mix, channel mix) and the WKV
state as [B, 3, C] float32 (`past.N.recurrent`), so onnxruntime-genai's RecurrentState binds both
under one index, as for Mamba (§8.11). The rescaling is HF's eval-mode `_rescale_layers`
(model/rwkv.py): a power of two, applied after each projection, which is exact.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import float_scalar, typed
from gqa_export.graph.recurrent_state import state_shapes
from gqa_export.graph.wkv import wkv

B, S = "batch_size", "sequence_length"


def rwkv_block(
    lc: LayerContext, h: ir.Value, past_shift: ir.Value, past_wkv: ir.Value
) -> tuple[ir.Value, tuple[ir.Value, ir.Value]]:
    """(the layer's output [B, S, H], (the new shift state [B, 2, H], the new WKV state [B, 3, C]))."""
    b, dims, params = lc.b, lc.dims, lc.params
    r, names, layer = dims.rwkv, lc.spec.mixers.rwkv, lc.spec.layer  # type: ignore[union-attr]
    assert r is not None and lc.padding is not None
    width = dims.hidden_size
    att_past, ffn_past = b.op_multi("Split", past_shift, b.const([1, 1], "shift_split", "int64"), axis=1, outputs=2)
    keep = b.op("Cast", lc.padding.keep, to=ir.DataType.BOOL, name="keep_bool")  # [B, S, 1]
    scale = r.output_scale(lc.i)

    with b.scope("attention"):
        x = normalize(b, h, lc.name(layer.input_norm), params, dims, "ln1", width)  # type: ignore[arg-type]
        prev, att_state = token_shift(lc, x, att_past)
        key = linear(lc, mix(lc, x, prev, names.att_mix_key), [names.att_key], None, "key")
        value = linear(lc, mix(lc, x, prev, names.att_mix_value), [names.att_value], None, "value")
        gate = b.op("Sigmoid", linear(lc, mix(lc, x, prev, names.att_mix_receptance), [names.att_receptance], None,
                                      "receptance"))  # fmt: skip
        y, wkv_state = wkv(lc, key, value, keep, past_wkv, names.time_decay, names.time_first)
        out = _scaled(lc, linear(lc, b.op("Mul", gate, y, name="gated_wkv"), [names.att_output], None, "output"), scale)
        h = typed(b.op("Add", h, out, name="residual_attention"), params.dtype, [B, S, width])

    with b.scope("feed_forward"):
        x = normalize(b, h, lc.name(layer.post_attention_norm), params, dims, "ln2", width)  # type: ignore[arg-type]
        prev, ffn_state = token_shift(lc, x, ffn_past)
        hidden = b.op("Relu", linear(lc, mix(lc, x, prev, names.ffn_mix_key), [names.ffn_key], None, "key"))
        value = _scaled(lc, linear(lc, b.op("Mul", hidden, hidden, name="squared_relu"), [names.ffn_value], None,
                                   "value"), scale)  # fmt: skip
        gate = b.op("Sigmoid", linear(lc, mix(lc, x, prev, names.ffn_mix_receptance), [names.ffn_receptance], None,
                                      "receptance"))  # fmt: skip
        h = typed(b.op("Add", h, b.op("Mul", gate, value, name="gated_value"), name="residual_ffn"), params.dtype,
                  [B, S, width])  # fmt: skip

    if r.halves_after(lc.i):  # HF: hidden_states / 2 after every rescale_every-th block
        h = typed(
            b.op("Div", h, float_scalar(b, 2.0, params.dtype, "two"), name="rescale"), params.dtype, [B, S, width]
        )
    shift = b.op("Concat", att_state, ffn_state, axis=1, name="shift_state")
    typed(shift, params.dtype, state_shapes(dims, "rwkv")[0])
    return h, (shift, wkv_state)


def token_shift(lc: LayerContext, x: ir.Value, past: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(x_prev [B, S, H]: each token's predecessor's x, the first one's from `past` [B, 1, H]; the
    new state [B, 1, H]: x at the run's last real token, per row)."""
    b = lc.b
    assert lc.padding is not None
    history = b.op("Concat", past, x, axis=1, name="shift_history")  # [B, 1 + S, H]
    start, stop = b.const([0], "shift_start", "int64"), b.const([-1], "shift_stop", "int64")
    prev = b.op("Slice", history, start, stop, b.const([1], "shift_axis", "int64"), name="shifted")
    # row `end` of the history (end: 1 + the index of the run's last real token) is that token's x
    rows = b.op("Unsqueeze", lc.padding.end, b.const([2], "row_axis", "int64"))  # [B, 1, 1]
    state = b.op("GatherND", history, rows, batch_dims=1, name="shift_state")  # [B, 1, H]
    return prev, state


def mix(lc: LayerContext, x: ir.Value, prev: ir.Value, module: str) -> ir.Value:
    """x * m + x_prev * (1 - m), with the checkpoint's time_mix m [1, 1, H], in HF's order."""
    b = lc.b
    name = lc.name(module, "")
    m = b.initializer(name, lc.params.tensor(name))
    one = float_scalar(b, 1.0, lc.params.dtype, "one")
    return b.op("Add", b.op("Mul", x, m), b.op("Mul", prev, b.op("Sub", one, m)), name=module.rpartition(".")[2])


def _scaled(lc: LayerContext, y: ir.Value, scale: float) -> ir.Value:
    """y times block i's power-of-two rescale (none at 1)."""
    if scale == 1.0:
        return y
    return lc.b.op("Mul", y, float_scalar(lc.b, scale, lc.params.dtype, "rescale"), name="rescaled")
