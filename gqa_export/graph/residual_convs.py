"""Residual short convolutions (Inkling, docs/coverage.md's Inkling section): y = x + conv(x), a causal
depthwise convolution of kernel K added to its own input, on the keys and values (before the key norm
and the cache), on the attention output after o_proj and on the MLP output, each before its residual add.

HF keeps one conv state per convolution, four per layer beside the KV cache; onnxruntime-genai 0.18 binds
two per layer beside a KV cache (its RecurrentState: `past.N.conv` and `past.N.recurrent`, found through
`past_recurrent_names`, docs/hybrid-state.md §1.1), so the four share them: the keys and values are
convolved together (their kernels concatenated on the channels) and keep the conv state [B, 2 Nkv D, K - 1],
the attention output and the MLP output keep the two halves of the recurrent state [B, 2 H, K - 1]. genai
sizes every layer's states from the first layer's inputs (RecurrentState's one conv and one recurrent shape),
so the conv state is as wide as the widest layer's keys and values (Inkling's sliding and full layers differ):
a narrower layer reads its first channels and writes zeros past them.

As HF does, a convolution's input is zeroed at padding and its residual is not; the graph convolves
concat(past, run) channels-first with ONNX Conv (no past input to an op: the RecurrentState may bind past
and present to one buffer, docs/hybrid-state.md §1.3, so `past` is read only through that concatenation),
and gathers each new state at the row's last real token (graph/recurrent_state.causal_conv's rule,
docs/hybrid-state.md §1.5). The layer's present states are complete once its MLP output is convolved:
`lc.state_io`'s presents hold the keys' state alone until then.

Inkling2 divides each sum by sqrt(K + 1) (ResidualConvNames.scaled), and convolves its full layers' keys and values
with per-token taps (`_tapped`: static taps plus a projection of the key's / value's own input, per kv head, the sum
over sqrt(2K + 1)), whose states are kept the same way."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import typed
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.graph.recurrent_state import state_shapes, without_padding

B, S = "batch_size", "sequence_length"


def _convolved(
    lc: LayerContext, x: ir.Value, modules: list[str], past: ir.Value, name: str
) -> tuple[ir.Value, ir.Value]:
    """x [B,S,C] + the causal depthwise convolution of its unpadded positions over concat(past, run), and the
    new state [B, C, K - 1] at each row's last real token. `modules`: kernels [C_i, 1, K] concatenated on C."""
    b, params = lc.b, lc.params
    assert lc.padding is not None
    weight_names = [lc.name(m) for m in modules]
    kernel = params.stacked(weight_names) if len(modules) > 1 else params.tensor(weight_names[0])
    graph_name = weight_names[0] if len(modules) == 1 else lc.name(f"{name}.conv1d")
    channels, width = int(kernel.shape[0]), int(kernel.shape[2]) - 1
    with b.scope(name):
        masked = b.op("Transpose", without_padding(lc, x), perm=[0, 2, 1], name="channels_first")
        history = b.op("Concat", past, masked, axis=2, name="past_and_run")  # [B, C, K - 1 + S]
        conv = b.op("Conv", history, b.initializer(graph_name, kernel), group=channels, name="conv")
        y = b.op("Add", x, b.op("Transpose", conv, perm=[0, 2, 1], name="channels_last"), name="residual")
        y = _scaled(lc, y, width + 2)  # Inkling2: over sqrt(K + 1)
        index = lc.padding.conv_state_index(b, width, channels)
        state = b.op("GatherElements", history, index, axis=2, name="conv_state")
    return typed(y, params.dtype, [B, S, channels]), typed(state, params.dtype, [B, channels, width])


def _scaled(lc: LayerContext, y: ir.Value, terms: int) -> ir.Value:
    """y / sqrt(terms) where the spec scales its convolutions' sums (Inkling2), else y."""
    names = lc.spec.residual_convs
    if names is None or not names.scaled:
        return y
    root = lc.b.const(np.asarray(np.sqrt(terms), NUMPY_DTYPES[lc.params.dtype]), f"sqrt{terms}")
    return lc.b.op("Div", y, root, name="scaled_sum")


def _tapped(
    lc: LayerContext, x: ir.Value, taps: str, dynamic_input: ir.Value, past: ir.Value, name: str
) -> tuple[ir.Value, ir.Value]:
    """Inkling2's per-token taps: x [B,S,C] + sum over lags j < K of (static_weight[j] + weight_proj(input)[j] of
    the channel's kv head) x the input j steps back, over sqrt(2K + 1); the new state as `_convolved`'s."""
    b, params = lc.b, lc.params
    assert lc.padding is not None
    static_name = lc.name(f"{taps}.static_weight", suffix="")
    kernel, channels = (int(d) for d in params.store.info(static_name).shape)
    heads, width = lc.layer.num_kv_heads, kernel - 1
    with b.scope(name):
        masked = b.op("Transpose", without_padding(lc, x), perm=[0, 2, 1], name="channels_first")
        history = b.op("Concat", past, masked, axis=2, name="past_and_run")  # [B, C, K - 1 + S]
        steps = b.op("Transpose", history, perm=[0, 2, 1], name="steps")  # [B, K - 1 + S, C]
        axis = b.const([1], "time_axis", "int64")
        tap_axis = b.const([3], "tap_axis", "int64")
        lags = []  # lag j: the inputs j steps back of each run position, [B, S, C, 1]
        for j in range(kernel):
            stop = b.const([-j if j else 2**62], f"stop{j}", "int64")
            lag = b.op("Slice", steps, b.const([width - j], f"start{j}", "int64"), stop, axis, name=f"lag{j}")
            lags.append(b.op("Unsqueeze", lag, tap_axis))
        windows = b.op(
            "Reshape", b.op("Concat", *lags, axis=3), b.const([0, 0, heads, -1, kernel], "per_head", "int64")
        )
        dynamic = linear(lc, dynamic_input, [f"{taps}.weight_proj"], None, "weight_proj")  # [B, S, Nkv K]
        dynamic = b.op("Reshape", dynamic, b.const([0, 0, heads, 1, kernel], "taps_shape", "int64"))
        static = params.derived(
            static_name, lambda w: w.T.reshape(heads, -1, kernel), shape=(heads, channels // heads, kernel)
        )
        weights = b.op("Add", b.initializer(static_name, static), dynamic, name="taps")  # [B, S, Nkv, D, K]
        summed = b.op("ReduceSum", b.op("Mul", windows, weights), b.const([-1], "last", "int64"), keepdims=0)
        y = b.op("Add", x, b.op("Reshape", summed, b.const([0, 0, channels], "flat", "int64")), name="residual")
        y = _scaled(lc, y, 2 * kernel + 1)
        index = lc.padding.conv_state_index(b, width, channels)
        state = b.op("GatherElements", history, index, axis=2, name="conv_state")
    return typed(y, params.dtype, [B, S, channels]), typed(state, params.dtype, [B, channels, width])


def convolved_keys_values(
    lc: LayerContext, k: ir.Value, v: ir.Value, inputs: tuple[ir.Value, ir.Value] | None = None
) -> tuple[ir.Value, ir.Value]:
    """The key and value projections [B,S,Nkv*D] each plus its convolution (one Conv over k | v; Inkling2's full
    layers: per-token taps from `inputs`, the keys' and values' own layer inputs); their state becomes the layer's
    conv state."""
    assert lc.state_io is not None and lc.spec.residual_convs is not None
    names, b = lc.spec.residual_convs, lc.b
    (past_conv, _), presents = lc.state_io
    width = lc.layer.num_kv_heads * lc.layer.head_dim
    shared = int(state_shapes(lc.dims, "residual_convs")[0][1])  # the widest layer's 2 Nkv D
    if shared > 2 * width:  # this layer's channels are the state's first 2 Nkv D
        past_conv = b.op(
            "Slice", past_conv, b.const([0], "kv_state_start", "int64"), b.const([2 * width], "kv_state_stop", "int64"),
            b.const([1], "channel_axis", "int64"), name="kv_past",
        )  # fmt: skip
    clipped = lc.spec.relative_bias.clipped if lc.spec.relative_bias is not None else None
    if clipped is not None and lc.layer.window <= 0:  # Inkling2's full layers: per-token taps, k and v apart
        assert inputs is not None
        halves = [
            b.op("Slice", past_conv, b.const([start], f"{tag}_state_start", "int64"),
                 b.const([start + width], f"{tag}_state_stop", "int64"), b.const([1], "channel_axis", "int64"))
            for start, tag in ((0, "k"), (width, "v"))
        ]  # fmt: skip
        k, k_state = _tapped(lc, k, clipped.key_taps, inputs[0], halves[0], "self_attn.k_proj.sconv")
        v, v_state = _tapped(lc, v, clipped.value_taps, inputs[1], halves[1], "self_attn.v_proj.sconv")
        out, state = None, b.op("Concat", k_state, v_state, axis=1, name="kv_state")
    else:
        kv = b.op("Concat", k, v, axis=-1, name="kv_projections")
        out, state = _convolved(lc, kv, [names.key, names.value], past_conv, "self_attn.kv_sconv")
    if shared > 2 * width:  # zeros past them, the state's shape every layer shares
        pads = b.const([0, 0, 0, 0, shared - 2 * width, 0], "kv_state_pads", "int64")
        state = typed(
            b.op("Pad", state, pads, name="kv_state_padded"),
            lc.params.dtype,
            [B, shared, int(state_shapes(lc.dims, "residual_convs")[0][2])],
        )
    presents[lc.i] = (state,)
    if out is None:
        return k, v
    k, v = b.op_multi("Split", out, b.const([width, width], "kv_split", "int64"), axis=-1, outputs=2, name="kv_split")
    return k, v


def convolved_output(lc: LayerContext, y: ir.Value, block: str) -> ir.Value:
    """A block's output [B,S,H] plus its convolution, `block` "attention" or "mlp" (a layer without residual
    convolutions: y as it is). The attention output's state waits for the MLP's; the MLP's completes the
    layer's presents: (k | v state, attention | MLP state)."""
    if lc.state_io is None or lc.spec.residual_convs is None or lc.layer.mixer != "residual_convs":
        return y
    names, b, hidden = lc.spec.residual_convs, lc.b, lc.dims.hidden_size
    (_, past), presents = lc.state_io
    start = 0 if block == "attention" else hidden
    half = b.op(
        "Slice", past, b.const([start], f"{block}_state_start", "int64"),
        b.const([start + hidden], f"{block}_state_stop", "int64"), b.const([1], "channel_axis", "int64"),
        name=f"{block}_past",
    )  # fmt: skip
    module = names.attention if block == "attention" else names.mlp
    out, state = _convolved(lc, y, [module], half, module.removesuffix(".conv1d"))
    presents[lc.i] = (*presents[lc.i], state)
    if block == "mlp":
        kv_state, attention_state, mlp_state = presents[lc.i]
        shape = state_shapes(lc.dims, "residual_convs")[1]
        both = typed(b.op("Concat", attention_state, mlp_state, axis=1, name="output_states"), lc.params.dtype, shape)
        presents[lc.i] = (kv_state, both)
    return out
