"""A gated short convolution: the token mixer of LFM2's conv layers, with a fixed-size state.

    [B, C, x] = split(in_proj(h)),  y = out_proj(C * conv(B * x))

conv is a depthwise causal Conv1d of kernel K (no activation). Instead of a KV cache the layer
carries its last K - 1 convolution inputs: com.microsoft.CausalConvWithState convolves
concat(state, this run's inputs) and returns the new state (docs/hybrid-state.md §2). The layout
is channels-first between in_proj and out_proj ([B, 3H, S]: the split takes contiguous blocks and
the op runs its fast kernel), and so is the state, [B, H, K - 1] (HF's layout). onnxruntime-genai
allocates the state from the input's static shape, starts it at zeros and binds `past.N.conv` /
`present.N.conv` by the names genai_config lists (docs/hybrid-state.md §1.2, §1.3). Padding: the
input is zeroed at pad positions, as HF does, and the new state ends at each row's last real token
(§1.5, graph/recurrent_state.py causal_conv).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import typed
from gqa_export.graph.recurrent_state import causal_conv, without_padding

B, S = "batch_size", "sequence_length"


def short_conv(lc: LayerContext, x: ir.Value, past: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(the mixer's output [B, S, H] after out_proj, the layer's new conv state)."""
    b, dims = lc.b, lc.dims
    assert lc.spec.mixers is not None
    names = lc.spec.mixers.short_conv
    hidden = dims.hidden_size
    projected = linear(lc, without_padding(lc, x), [names.in_proj], None, "in_proj")
    # channels-first from here to out_proj: the split takes contiguous blocks and the convolution
    # its fast layout; the two Transposes cost less (docs/hybrid-state.md §2.1)
    channels = b.op("Transpose", projected, perm=[0, 2, 1], name="bcx_channels_first")  # [B, 3H, S]
    gate_b, gate_c, inputs = b.op_multi(
        "Split", channels, b.const([hidden] * 3, "bcx_split", "int64"), axis=1, outputs=3, name="split_bcx"
    )
    gated = b.op("Mul", gate_b, inputs, name="b_times_x")
    convolved, present = causal_conv(lc, gated, names.conv, past, "none", "short_conv", channels_first=True)
    y = b.op("Transpose", b.op("Mul", gate_c, convolved, name="c_times_conv"), perm=[0, 2, 1], name="y_channels_last")
    return typed(linear(lc, y, [names.out_proj], None, "out_proj"), lc.params.dtype, [B, S, hidden]), present
