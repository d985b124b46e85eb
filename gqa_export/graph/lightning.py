"""Lightning attention: the token mixer of MiniMax's linear_attention layers, linear attention whose
state decays by a fixed rate per head (docs/hybrid-state.md §8.16).

    q | k | v = act(qkv_proj(h))        per head: q (d) | k (d) | v (d)
    S         = exp(-slope_h) S + k v^T,   o = S^T q        state [H, d, d], no score scale
    out       = out_proj(sigmoid(output_gate(h)) * rms(o) * norm.weight)   the norm over all H d channels

slope_h = (2^(-8/H))^(h+1) * (1 - i / (L - 1 + 1e-5) + 1e-5) for layer i of L: steep in the first
layers, nearly no decay in the last; HF keeps it as the buffer slope_rate, which the export reads
where the checkpoint holds it. HF computes a prompt in blocks of block_size (an intra-block masked
product plus the decayed state of the blocks before); that is the recurrence above summed in
another order, so com.microsoft.LinearAttention's `gated` rule with the decay -slope_h at every
token computes it exactly (§3), and block_size is not read.

onnxruntime-genai 0.18's RecurrentState binds a conv and a recurrent state under each index it
finds (§1.1); lightning attention has no convolution, so the layer carries a one-element
placeholder conv state [B, 1, 1] that it passes through unchanged beside its real state
`past.N.recurrent` [B, H, d, d].

Padding (§1.5): q, k and v are zeroed at pad positions, as HF does, and so is the decay, so a
right-padded row's state comes out of the prompt as it was at its last real token.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import typed
from gqa_export.graph.recurrent_state import state_shapes
from gqa_export.source.weights import WeightStore

B, S = "batch_size", "sequence_length"


# HF's persistent prompt-path buffers beside slope_rate: exp(-slope n) tables its blocked prompt reads as stored
DECAY_TABLES = ("query_decay", "key_decay", "diagonal_decay")


def decay_table_notes(spec: ArchSpec, store: WeightStore) -> list[str]:
    """The line saying that a checkpoint stores MiniMax's prompt decay tables below float32 (save_pretrained
    in bf16 writes them so): transformers computes a prompt with those rounded tables and each decode step
    with slope_rate, the package both with the stored slope_rate (the recurrence the tables approximate), so
    its prompt logits, and the decode steps after them, are off transformers' by the tables' rounding
    (docs/hybrid-state.md §8.16)."""
    if spec.mixers is None or "lightning" not in spec.mixers.kinds.values():
        return []
    module = spec.mixers.lightning.slope.rpartition(".")[0]
    rounded = sorted(
        {
            info.dtype
            for name in store.names()
            if name.rpartition(".")[2] in DECAY_TABLES
            and name.rpartition(".")[0].endswith(module)
            and (info := store.info(name)).dtype not in ("F32", "F64")
        }
    )
    if not rounded:
        return []
    return [
        f"the checkpoint stores the lightning layers' decay tables ({', '.join(DECAY_TABLES)}) in "
        f"{'/'.join(rounded)}: transformers runs a prompt through those rounded tables and the package through "
        "the exact decay at the stored slope_rate, so their logits differ by the rounding (0.01 to 0.13 on tiny "
        "random models; docs/hybrid-state.md §8.16)"
    ]


def slope_rates(heads: int, layer: int, layers: int) -> np.ndarray:
    """The per-head decay rates of layer `layer` of `layers`, float32 as HF's get_slope_rate."""
    base = np.float32(1 / (2 ** (8 / heads)))
    factor = np.float32(1 - layer / (layers - 1 + 1e-5) + 1e-5)
    return (base ** np.arange(1, heads + 1, dtype=np.float32) * factor).astype(np.float32)


def lightning(
    lc: LayerContext, x: ir.Value, past_placeholder: ir.Value, past_state: ir.Value
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(the mixer's output [B, S, hidden] after out_proj, the placeholder conv state, the new state)."""
    b, dims, dtype = lc.b, lc.dims, lc.params.dtype
    assert lc.spec.mixers is not None and lc.padding is not None
    names = lc.spec.mixers.lightning
    heads, d = dims.num_heads, lc.layer.head_dim
    width = heads * d

    qkv = b.op("Mul", activation(lc, linear(lc, x, [names.qkv], None, "qkv_proj")), lc.padding.keep, name="qkv")
    per_head = b.op("Reshape", qkv, b.const([0, 0, heads, 3 * d], "qkv_heads", "int64"))
    flat = b.const([0, 0, width], "heads_flat", "int64")
    q, k, v = (
        b.op("Reshape", part, flat, name=f"{n}_flat")
        for part, n in zip(
            b.op_multi("Split", per_head, b.const([d, d, d], "qkv_split", "int64"), axis=-1, outputs=3),
            "qkv",
            strict=True,
        )
    )
    slope = lc.name(names.slope, "")
    rate = (
        lc.params.derived(slope, lambda s: -s.reshape(-1), shape=(heads,))
        if slope in lc.params.store
        else lc.params.computed((heads,), lambda: -slope_rates(heads, lc.i, dims.num_layers))
    )
    # log-space decay -slope per token and head; 0 at a pad position, which leaves the state as it is
    rates = b.initializer(f"{slope.rpartition('.')[0]}.decay", rate)
    decay = b.op("Mul", lc.padding.keep, rates, name="decay")
    core, present = b.op_multi(
        "LinearAttention",
        q, k, v, past_state, decay,
        domain="com.microsoft",
        outputs=2,
        q_num_heads=heads,
        kv_num_heads=heads,
        update_rule="gated",
        scale=1.0,  # HF scales neither q nor the product
        name="lightning",
    )  # fmt: skip
    typed(present, dtype, state_shapes(dims, "lightning")[1])

    norm_name = lc.name(names.norm)
    normed = b.op(
        "SimplifiedLayerNormalization", core, b.initializer(norm_name, lc.params.vector([norm_name])),
        axis=-1, epsilon=names.norm_eps, stash_type=1, name="norm",
    )  # fmt: skip
    gate = b.op("Sigmoid", linear(lc, x, [names.output_gate], None, "output_gate"))
    gated = b.op("Mul", gate, normed, name="output_gated")
    y = typed(linear(lc, gated, [names.out_proj], None, "out_proj"), dtype, [B, S, dims.hidden_size])
    placeholder = b.op("Identity", past_placeholder, name="placeholder_state")
    return y, placeholder, present
