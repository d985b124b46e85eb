"""A layer that runs a shared transformer block ahead of its Mamba mixer (Zamba2's hybrid layers,
docs/hybrid-state.md §8.12):

    x = RMSNorm_2H([h | e])                 e: the token embeddings, h: the layer's input
    a = o_proj(attention(q, k, v of x))     q/k/v each + its use's adapter; this layer's own KV cache
    t = linear(MLP(RMSNorm(a)))             gate_up + its use's adapter; no residual inside the block
    h = h + mamba(RMSNorm(h + t))

The block's weights are those of the layer that first ran block u % num_mem_blocks (its use u,
model/shared_blocks.py) where transformers ties the blocks, the layer's own otherwise: they are read
under that layer's name and written once, every use's nodes reading the same initializers
(GraphBuilder.reusing_initializers); the adapters are use u's own.
Each use attends over its own cache (past_key_values.N.* of its layer N), as HF caches by layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.builder import typed
from gqa_export.graph.mlp import mlp_block

B, S = "batch_size", "sequence_length"
Mixer = Callable[[LayerContext, ir.Value], tuple[ir.Value, object]]


def block_context(lc: LayerContext) -> LayerContext:
    """The layer's context with names under the layer holding its block (model/shared_blocks.py) and
    its use's adapters there. The MLP adapter of a use always exists in HF's block, the attention ones
    where use_shared_attention_adapter: they are used where the checkpoint has them, and a missing MLP
    adapter is refused rather than dropped."""
    names, spec, layer = lc.spec.shared_block, lc.spec, lc.layer
    assert names is not None and layer.shared_use >= 0
    block = replace(lc, spec=replace(spec, layer_prefix=_block_prefix(spec, layer.shared_source)), adapters={})
    adapters = {}
    for module, adapter in names.adapters.items():
        adapter = adapter.format(u=layer.shared_use)
        if block.has(f"{adapter}.0"):
            adapters[module] = block.name(adapter, "")
        elif module == spec.layer.gate_up:
            missing = block.name(f"{adapter}.0")
            raise InputError(
                f"{spec.name}: the checkpoint has no {missing}, the MLP adapter of shared-block use "
                f"{layer.shared_use} (layer {lc.i}); it does not match its config"
            )
    return replace(block, adapters=adapters)


def _block_prefix(spec: ArchSpec, layer: int) -> str:
    assert spec.shared_block is not None
    return f"{spec.layer_prefix.format(i=layer)}{spec.shared_block.block}"


def shared_block_layer(
    lc: LayerContext, h: ir.Value, embeddings: ir.Value, attention: Mixer, state: Mixer
) -> tuple[ir.Value, object]:
    """(the layer's output, its KV) for a layer with a shared block (LayerDims.shared_use >= 0)."""
    b, dims, params = lc.b, lc.dims, lc.params
    names, L = lc.spec.shared_block, lc.spec.layer
    assert names is not None and L.input_norm is not None
    hidden = dims.hidden_size
    block = block_context(lc)
    with b.scope("shared_block"), b.reusing_initializers():
        joined = typed(b.op("Concat", h, embeddings, axis=-1, name="with_embeddings"), params.dtype, [B, S, 2 * hidden])
        x = normalize(b, joined, block.name(names.input_norm), params, dims, "input_layernorm", 2 * hidden)
        with b.scope("attn"):
            out, kv = attention(block, x)
            attended = linear(block, out, [L.o], None, "o_proj")
        x = normalize(b, attended, block.name(names.mlp_norm), params, dims, "pre_ff_layernorm", hidden)
        with b.scope("mlp"):
            y = mlp_block(block, x)
    t = linear(lc, y, [names.linear], None, "linear")  # the layer's own projection
    mixer = replace(lc, spec=replace(lc.spec, layer_prefix=f"{lc.spec.layer_prefix}{names.mixer}"))
    x = normalize(b, b.op("Add", h, t, name="with_block"), mixer.name(L.input_norm), params, dims, "input_layernorm",
                  hidden)  # fmt: skip
    with b.scope(lc.layer.mixer):
        y, _ = state(mixer, x)
    shape = [B, S, hidden]
    return typed(b.op("Add", h, typed(y, params.dtype, shape), name="residual"), params.dtype, shape), kv
