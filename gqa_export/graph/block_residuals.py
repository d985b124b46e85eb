"""Block attention residuals (Inkling2, docs/coverage.md's Inkling section): the residual stream regrouped into
blocks, and the inputs of each block read as an attention over them.

Every `block_size` layers (layer i with i % block_size == 0) the layer's input joins a stack of block states. A
layer's attention input, its MLP input and the final norm's input are each an attention of learned queries over the
stack plus the running partial sum: the states RMS-normed without a weight (eps 1e-6), scored against the query
times H^-0.5, softmax over the stack, the normed states weighted by it, in float32. A full layer reads three such
inputs (its queries', keys' and values', each through its own input norm), a sliding layer one; layer 0 reads its
input as it is. At a block boundary the partial sum restarts from the attention output; elsewhere the attention
output is added to the layer input. The MLP's output is added to the partial sum as usual.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.decoder_layer import Mixer, block_norm, layer_mlp
from gqa_export.graph.message_gates import message_gate
from gqa_export.graph.output_gate import gated_output
from gqa_export.graph.params import WIDER_THAN_IO_META, Params
from gqa_export.graph.residual_convs import convolved_output
from gqa_export.graph.standard import LayerKV


def block_attention(
    b: GraphBuilder, params: Params, query: str, states: list[ir.Value], partial: ir.Value, hidden: int
) -> list[ir.Value]:
    """The stored queries' ([H] or [n, H]) attention over states + [partial] ([B,S,H] each): n values [B,S,H]."""
    wide = Params(params.store, ir.DataType.FLOAT)  # float32 whatever the graph's dtype, as HF computes it
    count = int(np.prod(params.store.info(query).shape)) // hidden
    stack = [b.op("Unsqueeze", s, b.const([2], "stack_axis", "int64")) for s in [*states, partial]]
    stacked = stack[0] if len(stack) == 1 else b.op("Concat", *stack, axis=2, name="stacked")  # [B,S,N,H]
    if params.dtype != ir.DataType.FLOAT:
        stacked = b.op("Cast", stacked, to=ir.DataType.FLOAT)
    ones = b.const(np.ones(hidden, np.float32), "unit_weight")
    normed = b.op("SimplifiedLayerNormalization", stacked, ones, axis=-1, epsilon=1e-6, stash_type=1, name="normed")
    keys = b.initializer(query, wide.derived(query, lambda q: q.reshape(-1, hidden).T, shape=(hidden, count)))
    scale = b.const(np.asarray(hidden**-0.5, np.float32), "scale")
    for value in (ones, keys, scale):
        value.meta[WIDER_THAN_IO_META] = True
    logits = b.op("Mul", b.op("MatMul", normed, keys, name="scores"), scale)  # [B,S,N,n]
    probs = b.op("Softmax", logits, axis=2, name="over_blocks")
    out = b.op("MatMul", b.op("Transpose", probs, perm=[0, 1, 3, 2]), normed, name="weighted")  # [B,S,n,H]
    if params.dtype != ir.DataType.FLOAT:
        out = b.op("Cast", out, to=params.dtype)
    if count == 1:
        return [b.op("Squeeze", out, b.const([2], "query_axis", "int64"), name="block_input")]
    parts = b.op_multi("Split", out, b.const([1] * count, "queries", "int64"), axis=2, outputs=count)
    return [
        b.op("Squeeze", p, b.const([2], "query_axis", "int64"), name=f"block_input{n}") for n, p in enumerate(parts)
    ]


def block_residual_layer(
    lc: LayerContext, h: ir.Value, blocks: list[ir.Value], attention: Mixer, messages: list[ir.Value] | None = None
) -> tuple[ir.Value, LayerKV | None]:
    """One Inkling2 layer on its input h; a block boundary appends h to `blocks` (the model's stack). `messages`:
    the query, key, value and MLP messages a later loop pass's layer gates into its inputs (graph/loop_messages.py;
    a sliding layer's one attention input then becomes three)."""
    names, L, b, hidden = lc.spec.block_residuals, lc.spec.layer, lc.b, lc.dims.hidden_size
    assert names is not None and lc.dims.block_size > 0
    full = lc.layer.window <= 0
    with b.scope("attention_input"):
        count = 3 if full else 1
        inputs = (
            [h] * count if lc.i == 0 else block_attention(b, lc.params, lc.name(names.attention, ""), blocks, h, hidden)
        )
    gates = names.messages
    x: ir.Value | tuple[ir.Value, ...]
    if messages is not None:  # Inkling2-Loop: each input gated with its message before its norm
        assert gates is not None
        inputs = [message_gate(lc, gates, inputs[n % len(inputs)], messages[n], n) for n in range(3)]
        norms = names.input_norms if full else (L.input_norm,) * 3
        x = tuple(block_norm(lc, t, n, f"{tag}_input") for t, n, tag in zip(inputs, norms, "qkv", strict=True))
        query_input = x[0]
    elif full:  # queries', keys' and values' inputs, each through its own norm
        x = tuple(block_norm(lc, t, n, n) for t, n in zip(inputs, names.input_norms, strict=True))
        query_input = x[0]
    else:
        x = query_input = block_norm(lc, inputs[0], L.input_norm, "input_layernorm")
    with b.scope("attn"):
        out, kv = attention(lc, x)  # type: ignore[arg-type]
        out = gated_output(lc, query_input, out)  # sigmoid(gate_proj(x)) before o_proj
        out = convolved_output(lc, linear(lc, out, [L.o], None, "o_proj"), "attention")
    if lc.i % lc.dims.block_size == 0:  # a block boundary: the layer input joins the stack, the sum restarts
        blocks.append(h)
        residual = out
    else:
        residual = b.op("Add", h, out, name="residual_attn")
    with b.scope("mlp_input"):
        mlp_input = block_attention(b, lc.params, lc.name(names.mlp, ""), blocks, residual, hidden)[0]
    if messages is not None and gates is not None:
        mlp_input = message_gate(lc, gates, mlp_input, messages[3], 3)
    x_mlp = block_norm(lc, mlp_input, L.post_attention_norm, "post_attention_layernorm")
    with b.scope("mlp"):
        return b.op("Add", residual, layer_mlp(lc, x_mlp, residual), name="residual_mlp"), kv
