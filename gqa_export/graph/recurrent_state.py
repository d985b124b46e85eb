"""The graph inputs and outputs of layers that carry recurrent state instead of a KV cache.

Every state is a graph input `past.N.<kind>` fed back as the output `present.N.<kind>`, N the
layer. onnxruntime-genai allocates it from the input's static dims (every axis but the batch),
starts it at zeros and swaps it each step (docs/hybrid-state.md §1.3); it finds short-convolution
layers through `decoder.layer_types` and the layers with a conv and a recurrent state under one
index through `past_recurrent_names` (§1.1, §1.2). The mixers themselves (graph/short_conv.py,
graph/gated_deltanet.py, graph/mamba2.py, graph/mamba.py, graph/rglru.py, graph/lightning.py) take
their pasts and
return their presents in the order listed here.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.model.dims import ModelDims

B = "batch_size"
PAST_CONV, PRESENT_CONV = "past.%d.conv", "present.%d.conv"
PAST_RECURRENT, PRESENT_RECURRENT = "past.%d.recurrent", "present.%d.recurrent"
CONV, RECURRENT = (PAST_CONV, PRESENT_CONV), (PAST_RECURRENT, PRESENT_RECURRENT)
STATE_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "short_conv": (CONV,),  # LFM2: the last K - 1 convolution inputs
    "gated_deltanet": (CONV, RECURRENT),  # Qwen3.5: the conv inputs, then the delta rule's state
    "mamba2": (CONV, RECURRENT),  # Mamba2: the conv inputs, then the SSM state
    "mamba": (CONV, RECURRENT),  # Mamba (v1): the conv inputs, then the SSM state
    "rglru": (CONV, RECURRENT),  # RG-LRU: the conv inputs, then the per-channel recurrence's state
    "lightning": (CONV, RECURRENT),  # lightning attention: a placeholder the runtime binds, then its state
    # RWKV-4: the two token-shift inputs (time mix, channel mix), then the WKV state (num, den, max)
    "rwkv": (CONV, RECURRENT),
    # xLSTM's mLSTM: the normalizer and max stabilizer (n | m), then the matrix memory C
    "mlstm": (CONV, RECURRENT),
    # compressed convolutional attention: the last (k0 - 1) + (k1 - 1) q|k projections, then the
    # previous token's delayed value projection (beside the layer's KV cache)
    "cca": (CONV, RECURRENT),
    # residual short convolutions (Inkling): the keys' and values' last K - 1 projections, then the attention
    # output's and the MLP output's (four convolutions' states in genai's two per layer, beside the KV cache)
    "residual_convs": (CONV, RECURRENT),
}
MIXER_NAMES = {
    "short_conv": "short-convolution",
    "gated_deltanet": "gated-DeltaNet",
    "mamba2": "Mamba2",
    "mamba": "Mamba",
    "rglru": "RG-LRU",
    "lightning": "lightning-attention",
    "rwkv": "RWKV",
    "mlstm": "mLSTM",
    "cca": "compressed convolutional attention",
    "residual_convs": "residual short-convolution",
}

Shape = list[int | str]


def state_layers(dims: ModelDims) -> dict[int, str]:
    """layer -> its mixer kind, for the layers that carry state."""
    return {layer.index: layer.mixer for layer in dims.layers if layer.mixer in STATE_NAMES}


def state_shapes(dims: ModelDims, mixer: str) -> tuple[Shape, ...]:
    """The mixer's states, in STATE_NAMES order: conv [B, K - 1, channels] (channels-last; LFM2's
    short conv [B, channels, K - 1], channels-first as its convolution runs), then
    the recurrent state (DeltaNet [B, Hv, dk, dv], Mamba2 [B, heads, state, head_dim], Mamba
    [B, channels, state, 1]: one LinearAttention head per channel, docs/hybrid-state.md §8.3; RG-LRU
    [B, channels, 1, 1]: a scalar state per channel, §8.15). Lightning attention has no
    convolution: its first state is a one-element placeholder that genai's RecurrentState binds
    beside every recurrent state (§1.1, §8.16), then [B, H, d, d]."""
    if mixer == "short_conv":
        return ([B, dims.hidden_size, dims.conv_kernel - 1],)
    if mixer == "residual_convs":  # [B, 2 Nkv D, K - 1] k | v (the widest layer's), [B, 2 H, K - 1] attn | mlp
        kv = max(2 * layer.num_kv_heads * layer.head_dim for layer in dims.layers if layer.mixer == mixer)
        return [B, kv, dims.conv_kernel - 1], [B, 2 * dims.hidden_size, dims.conv_kernel - 1]
    if mixer == "gated_deltanet":
        d = dims.deltanet
        assert d is not None
        return [B, d.kernel - 1, d.conv_channels], [B, d.value_heads, d.key_dim, d.value_dim]
    if mixer == "lightning":
        d = next(layer.head_dim for layer in dims.layers if layer.mixer == "lightning")
        return [B, 1, 1], [B, dims.num_heads, d, d]
    if mixer == "rwkv":  # [B, 2, H]: the last time-mix and channel-mix inputs; [B, 3, C]: num, den, max
        r = dims.rwkv
        assert r is not None
        return [B, 2, dims.hidden_size], [B, 3, r.channels]
    if mixer == "mlstm":  # [B, NH, dqk + 1]: n | m; [B, NH, dqk, dv]: C
        x = dims.mlstm
        assert x is not None
        return [B, x.heads, x.qk_head + 1], [B, x.heads, x.qk_head, x.v_head]
    if mixer == "cca":  # [B, (Nq + Nkv) D, K]: q|k projections, channels-first; [B, 1, Nkv D / 2]: delayed value
        layer = next(layer for layer in dims.layers if layer.mixer == "cca")
        k0, k1 = dims.cca_kernels
        qk = (dims.num_heads + layer.num_kv_heads) * layer.head_dim
        return [B, qk, (k0 - 1) + (k1 - 1)], [B, 1, layer.num_kv_heads * layer.head_dim // 2]
    if mixer == "mamba":
        v = dims.mamba
        assert v is not None
        return [B, v.kernel - 1, v.inner], [B, v.inner, v.state, 1]
    if mixer == "rglru":
        r = dims.rglru
        assert r is not None
        return [B, r.kernel - 1, r.width], [B, r.width, 1, 1]
    m = dims.mamba2
    assert mixer == "mamba2" and m is not None
    return [B, m.kernel - 1, m.conv_channels], [B, m.heads, m.state, m.head_dim]


def state_dtypes(mixer: str, dtype: ir.DataType) -> tuple[ir.DataType, ...]:
    """Each state's dtype, in STATE_NAMES order: the graph's, except RWKV's WKV state, which HF keeps
    in float32 in a half-precision model (its num/den/max state tensors), as the graph does."""
    if mixer == "rwkv":
        return dtype, ir.DataType.FLOAT
    return tuple(dtype for _ in STATE_NAMES[mixer])


def state_inputs(b: GraphBuilder, dims: ModelDims, dtype: ir.DataType) -> dict[int, tuple[ir.Value, ...]]:
    """Each state layer's past inputs, layer by layer."""
    return {
        i: tuple(
            b.input(past % i, state_dtype, shape)
            for (past, _), shape, state_dtype in zip(
                STATE_NAMES[mixer], state_shapes(dims, mixer), state_dtypes(mixer, dtype), strict=True
            )
        )
        for i, mixer in state_layers(dims).items()
    }


def add_state_outputs(
    b: GraphBuilder, dims: ModelDims, presents: dict[int, tuple[ir.Value, ...]], dtype: ir.DataType
) -> None:
    """present.N.* for every state layer, shaped as its inputs."""
    kinds = state_layers(dims)
    for i, values in sorted(presents.items()):
        names, shapes, dtypes = STATE_NAMES[kinds[i]], state_shapes(dims, kinds[i]), state_dtypes(kinds[i], dtype)
        for (_, present), shape, value, state_dtype in zip(names, shapes, values, dtypes, strict=True):
            b.output(value, present % i, state_dtype, shape)


def without_padding(lc: LayerContext, x: ir.Value, name: str = "keep_tokens") -> ir.Value:
    """x [B, S, ...] with the padding's positions zeroed: what HF's mixers do to their input
    (apply_mask_to_padding_states, docs/hybrid-state.md §4 item 5), which leaves a left-padded
    row's conv and recurrent state at zeros until its first token."""
    assert lc.padding is not None
    return lc.b.op("Mul", x, lc.padding.keep, name=name)


def causal_conv(
    lc: LayerContext,
    x: ir.Value,
    module: str,
    past: ir.Value,
    activation: str,
    mixer: str,
    parts: Sequence[str] | None = None,
    channels_first: bool = False,
) -> tuple[ir.Value, ir.Value]:
    """The depthwise causal convolution every state mixer starts with: com.microsoft.CausalConvWithState
    over x [B, S, C] (channels-last) or, with `channels_first`, x [B, C, S], with the checkpoint's
    kernel [C, 1, K] (and its bias where the checkpoint stores one), convolving concat(past, x)
    (docs/hybrid-state.md §2). Returns (the output and the new conv state, both laid out as x: the
    state is [B, K - 1, C] or [B, C, K - 1], typed as the mixer's first state). `parts`: kernels
    stored per channel group (OLMo-Hybrid's q/k/v_conv1d), concatenated into the one `module` names
    where the checkpoint does not store that one (transformers 5.x's own layout of Kimi-Linear does).

    Channels-first is the op's fast layout on CPU (3-6x the channels-last kernel's speed,
    docs/hybrid-state.md §2.1): a mixer whose projection splits cheaper channels-first takes it
    (LFM2's short conv).

    The new state is the K - 1 inputs that end at the run's last real token, gathered per row from
    concat(past, x): the op's own present (the last K - 1 columns) would hold a right-padded row's
    pad positions (docs/hybrid-state.md §1.5). Channels-last (the mixers whose states genai keeps in
    a RecurrentState, which may bind past and present to one buffer, §1.3): the op convolves the
    concatenation without a past, so nothing reads `past` after the state is written, and the first
    K - 1 outputs, which only the zeros before `past` reach, are sliced off. Channels-first (LFM2's
    short conv, whose conv cache genai swaps into a fresh present each step): the op is fed `past`
    itself and returns the run's outputs, one Slice fewer per layer and step (2% of LFM2's decode,
    benchmarks/results/speed_vs_builder.md "Fifth round"; bit-identical outputs)."""
    b = lc.b
    assert lc.padding is not None
    weight_name = lc.name(module)
    stacked = bool(parts) and weight_name not in lc.params.store  # else the whole kernel (5.x)
    kernel = lc.params.stacked([lc.name(p) for p in parts]) if stacked else lc.params.tensor(weight_name)
    weight = b.initializer(weight_name, kernel)
    bias = None
    if lc.has(module, "bias"):
        bias_name = lc.name(module, "bias")
        bias = b.initializer(bias_name, lc.params.vector([bias_name]))
    state_shape = state_shapes(lc.dims, mixer)[0]
    time_axis = 2 if channels_first else 1
    width = int(state_shape[time_axis])  # K - 1
    history = b.op("Concat", past, x, axis=time_axis, name="past_and_run")  # K - 1 + S steps
    if channels_first:  # the op reads the past itself: its outputs are the run's, no Slice (a conv cache only)
        convolved, _ = b.op_multi(
            "CausalConvWithState", x, weight, bias, past, domain="com.microsoft", outputs=2, ndim=1,
            channels_last=0, activation=activation, name="causal_conv",
        )  # fmt: skip
    else:
        convolved, _ = b.op_multi(
            "CausalConvWithState", history, weight, bias, domain="com.microsoft", outputs=2, ndim=1,
            channels_last=1, activation=activation, name="causal_conv",
        )  # fmt: skip
        convolved = b.op(
            "Slice", convolved, b.const([width], "conv_start", "int64"), b.const([2**62], "conv_stop", "int64"),
            b.const([time_axis], "conv_axis", "int64"), name="run_outputs",
        )  # fmt: skip
    if channels_first:
        index = lc.padding.conv_state_index(b, width, int(state_shape[1]))
        present = b.op("GatherElements", history, index, axis=2, name="conv_state")  # [B, C, K - 1]
    else:
        index = lc.padding.conv_state_index(b, width)
        present = b.op("GatherND", history, index, batch_dims=1, name="conv_state")  # [B, K - 1, C]
    typed(present, lc.params.dtype, state_shape)
    return convolved, present
