"""xLSTM's mLSTM layer (transformers' xLSTMLayer, weight_mode "single"; docs/hybrid-state.md §8.19):

    q, k, v, o  = q(x), k(x), v(x), ogate_preact(x)             per head: dqk, dqk, dv, dv
    i, f        = cap tanh(igate_preact(x) / cap), likewise f    one per head (gate_soft_cap)
    per head, with the state (C [dqk, dv], n [dqk], m):
      m' = max(logsigmoid(f) + m, i);  a = e^(logsigmoid(f) + m - m');  b = e^(i - m')
      C  = a C + b k v^T;  n = a n + b k;  q~ = q / sqrt(dqk)
      h  = q~ C / (max(|q~ . n|, e^(-m')) + eps)
    out = out_proj(sigmoid(o) * multihead_layernorm(h))

The recurrence runs as an ONNX Scan whose body is HF's step kernel (`mlstm_recurrent_step_native`)
op for op; its exponential input gate with the max stabilizer and the normalizer floor is no
LinearAttention rule. HF's prompts go through its chunkwise kernel, the same recurrence regrouped
(equal up to rounding where eps e^m stays small). The three states travel as two, which
onnxruntime-genai's RecurrentState binds under one index: n | m as `past.N.conv` [B, NH, dqk + 1]
and C as `past.N.recurrent` [B, NH, dqk, dv]; both start at zeros, as HF's xLSTMCache does. A padded
position passes the state through unchanged (§1.5).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import soft_cap
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import GraphBuilder, float_scalar, typed
from gqa_export.graph.params import NUMPY_DTYPES

B, S = "batch_size", "sequence_length"


def mlstm(lc: LayerContext, x: ir.Value, past_nm: ir.Value, past_c: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the layer's output [B, S, H] after out_proj, the new n | m state, the new C state)."""
    b, dims, dtype = lc.b, lc.dims, lc.params.dtype
    m = dims.mlstm
    assert m is not None and lc.spec.mixers is not None and lc.padding is not None
    names = lc.spec.mixers.mlstm
    nh, dqk, dv = m.heads, m.qk_head, m.v_head

    def heads(value: ir.Value, width: int, name: str) -> ir.Value:
        return b.op("Reshape", value, b.const([0, 0, nh, width], f"{name}_heads", "int64"), name=f"{name}_heads")

    q = heads(linear(lc, x, [names.q], None, "q"), dqk, "q")
    k = heads(linear(lc, x, [names.k], None, "k"), dqk, "k")
    v = heads(linear(lc, x, [names.v], None, "v"), dv, "v")
    o = linear(lc, x, [names.o], None, "ogate_preact")
    i_gate = heads(_soft_cap(lc, linear(lc, x, [names.i], None, "igate_preact"), "igate"), 1, "igate")
    f_gate = heads(_soft_cap(lc, linear(lc, x, [names.f], None, "fgate_preact"), "fgate"), 1, "fgate")
    keep = b.op("Unsqueeze", b.op("Cast", lc.padding.keep, to=ir.DataType.BOOL), b.const([3], "keep_axis", "int64"))
    n, top = b.op_multi("Split", past_nm, b.const([dqk, 1], "nm_split", "int64"), axis=2, outputs=2, name="split_n_m")
    outs = b.op_multi(
        "Scan", past_c, n, top, q, k, v, i_gate, f_gate, keep,
        body=_step_body(lc, nh, dqk, dv), num_scan_inputs=6, scan_input_axes=[1] * 6, scan_output_axes=[1],
        outputs=4, name="mlstm_scan",
    )  # fmt: skip
    new_c, new_n, new_m, h = outs
    present_nm = typed(b.op("Concat", new_n, new_m, axis=2, name="nm_state"), dtype, [B, nh, dqk + 1])
    typed(new_c, dtype, [B, nh, dqk, dv])
    # multi-head LayerNorm: each head's dv channels normalized, then the flat [NH dv] weight
    ones = b.const(np.ones(dv, NUMPY_DTYPES[dtype]), "head_norm_ones")
    normed = b.op("LayerNormalization", h, ones, axis=-1, epsilon=dims.rms_eps, stash_type=1, name="head_norm")
    flat = b.op("Reshape", normed, b.const([0, 0, nh * dv], "heads_flat", "int64"))
    weight_name = lc.name(names.norm)
    flat = b.op("Mul", flat, b.initializer(weight_name, lc.params.vector([weight_name])), name="head_norm_weight")
    gated = b.op("Mul", b.op("Sigmoid", o), flat, name="output_gate")
    y = typed(linear(lc, gated, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    return y, present_nm, new_c


def _soft_cap(lc: LayerContext, x: ir.Value, name: str) -> ir.Value:
    """cap * tanh(x / cap), HF's soft_cap of the gate pre-activations (none without a cap)."""
    cap = lc.dims.mlstm.gate_cap  # type: ignore[union-attr]
    if not cap:
        return x
    c = float_scalar(lc.b, cap, lc.params.dtype, "gate_cap")
    return soft_cap(lc.b, x, c, f"{name}_soft_cap")


def _step_body(lc: LayerContext, nh: int, dqk: int, dv: int) -> ir.Graph:
    """One token: state (C, n, m) and scan inputs (q, k, v, i, f, keep) in; the state and h out."""
    m_dims = lc.dims.mlstm
    assert m_dims is not None
    dtype, np_dtype = lc.params.dtype, NUMPY_DTYPES[lc.params.dtype]
    s = GraphBuilder(f"mlstm_step_{lc.i}", {})
    tag = f"layers.{lc.i}"
    with s.scope(tag), s.scope("mlstm_step"):

        def inp(name: str, shape: list[int | str], kind: ir.DataType = dtype) -> ir.Value:
            return s.input(f"{tag}.mlstm_{name}", kind, shape)

        c, n, m = inp("c", [B, nh, dqk, dv]), inp("n", [B, nh, dqk]), inp("m", [B, nh, 1])
        q, k, v = inp("q", [B, nh, dqk]), inp("k", [B, nh, dqk]), inp("v", [B, nh, dv])
        i_gate, f_gate = inp("i", [B, nh, 1]), inp("f", [B, nh, 1])
        keep = inp("keep", [B, 1, 1], ir.DataType.BOOL)
        # constants as Constant nodes: a subgraph's initializers would be one more thing to carry
        last = s.op("Constant", value=ir.tensor(np.array([-1], np.int64)), name="last_axis")
        before_last = s.op("Constant", value=ir.tensor(np.array([-2], np.int64)), name="before_last_axis")
        scale = s.op("Constant", value=ir.tensor(np.asarray(dqk**-0.5, np_dtype)), name="q_scale")
        eps = s.op("Constant", value=ir.tensor(np.asarray(m_dims.eps, np_dtype)), name="eps")
        log_f = s.op("Neg", s.op("Softplus", s.op("Neg", f_gate)), name="logsigmoid_f")  # logsigmoid(f)
        decayed = s.op("Add", log_f, m, name="decayed_m")
        new_m = s.op("Max", decayed, i_gate, name="new_m")
        a = s.op("Exp", s.op("Sub", decayed, new_m), name="f_act")
        bi = s.op("Exp", s.op("Sub", i_gate, new_m), name="i_act")
        q_scaled = s.op("Mul", q, scale, name="q_scaled")
        outer = s.op("Mul", s.op("Unsqueeze", k, last), s.op("Unsqueeze", v, before_last), name="k_v")
        new_c = s.op(
            "Add", s.op("Mul", s.op("Unsqueeze", a, last), c), s.op("Mul", s.op("Unsqueeze", bi, last), outer),
            name="new_c",
        )  # fmt: skip
        new_n = s.op("Add", s.op("Mul", a, n), s.op("Mul", bi, k), name="new_n")
        q_row = s.op("Unsqueeze", q_scaled, before_last)  # [B, NH, 1, dqk]
        h_num = s.op("Squeeze", s.op("MatMul", q_row, new_c), before_last, name="h_num")  # [B, NH, dv]
        qn = s.op("Squeeze", s.op("MatMul", q_row, s.op("Unsqueeze", new_n, last)), last, name="q_n")  # [B, NH, 1]
        floor = s.op("Exp", s.op("Neg", new_m), name="floor")
        floored = s.op("Max", s.op("Abs", qn, name="denominator_abs"), floor, name="denominator_max")
        denominator = s.op("Add", floored, eps, name="denominator")
        keep_c = s.op("Unsqueeze", keep, last)  # [B, 1, 1, 1]
        outs = [
            (s.op("Where", keep_c, new_c, c, name="c_out"), [B, nh, dqk, dv]),
            (s.op("Where", keep, new_n, n, name="n_out"), [B, nh, dqk]),
            (s.op("Where", keep, new_m, m, name="m_out"), [B, nh, 1]),
            (s.op("Div", h_num, denominator, name="h"), [B, nh, dv]),
        ]
        for value, shape in outs:
            typed(value, dtype, shape)
            s.graph.outputs.append(value)
    return s.graph
