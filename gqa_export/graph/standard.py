"""Standard ONNX Attention (opset 24) layers for modes `bias` and `split` (its prefill graph).

- RoPE is applied with plain ops (`rotary.py`: the same cos/sin tables GQA uses), so the tables
  and initializer names are shared with the GQA decode graph.
- `bias` (layout "concat"): Attention gets past_key/past_value and concatenates (present = past +
  S); ORT GenAI must run it with past_present_share_buffer false (docs/ortgenai.md §3.3, §6.2).
- `scatter` (layouts "slice" and "nonpad"): TensorScatter (opset 24, axis 2) writes this step's K/V
  into the shared max_length buffer at write_index per row, in place when ORT GenAI binds one
  buffer as input and output (docs/split-pipeline.md §2). "slice": Attention reads the buffer's first T
  slots (with a [B,1,S,T] bias where a layer needs more than causality): the CPU form (CPU
  Attention-24 computes every key it is given, then masks; 0.033 ms vs 0.40 ms per decode step at
  T=300 of a 4096 buffer). "nonpad": Attention reads
  the whole buffer with `nonpad_kv_seqlen` = write_index + S per row, is_causal (bottom-right per
  row) and no mask where a layer needs nothing else: the form ORT's CUDA Attention runs with its
  flash / cuDNN kernels (any attn_mask sends it to memory-efficient or unfused attention); windowed
  and bidirectional layers add a [B,1,S,max_length] bias.
- Masks come as an additive float bias (`masks.py`); softcap is the op's attribute, applied
  before the bias as in GQA (docs/ort-ops.md §2.2).
- A KV-shared layer (Gemma-4) runs Attention over the K/V its source layer attended to, with
  its own query and the bias of its own layer kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext, rotated_heads
from gqa_export.graph.latent_attention import latent_heads
from gqa_export.graph.masks import MaskValues


@dataclass(frozen=True)
class LayerKV:
    """A layer's cache outputs and the K/V its attention read ([B, kv_heads, T, D]); a KV-shared
    layer attends over its source's `keys`/`values` and has no presents of its own."""

    present_key: ir.Value | None
    present_value: ir.Value | None
    keys: ir.Value
    values: ir.Value


def standard_attention(
    lc: LayerContext,
    x: ir.Value,
    past: tuple[ir.Value, ir.Value] | None,
    bias: ir.Value | None,
    masks: MaskValues,
    rope: dict[str, tuple[ir.Value, ir.Value]],
    layout: str,
    source: LayerKV | None = None,
) -> tuple[ir.Value, LayerKV]:
    """Returns (output [B,S,Nq*D], the layer's KV). `source`: the producer's KV for a KV-shared layer."""
    b, dims, layer = lc.b, lc.dims, lc.layer
    table = rope[layer.rope] if layer.rope is not None else None
    shaped = latent_heads(lc, x, table) if dims.latent is not None else rotated_heads(lc, x, table, reshape_v=True)
    bnsh = {name: b.op("Transpose", value, perm=[0, 2, 1, 3], name=f"{name}_bnsh") for name, value in shaped.items()}
    attrs = dict(scale=dims.scale(layer), softcap=dims.attn_softcap or None, is_causal=int(bias is None))
    # A layer needing only causality (+ padding) gets no mask: is_causal is bottom-right per row
    # with nonpad_kv_seqlen = write_index + S, and slots past it hold no key (the compact layout
    # has no holes). Building a [B,1,S,T] bias every step cost 10-20% of CPU decode at T=4096.
    nonpad = masks.nonpad if layout == "nonpad" or (layout == "slice" and bias is None) else None
    if source is not None:
        y = b.op("Attention", bnsh["q"], source.keys, source.values, bias, None, None, nonpad, **attrs)
        kv = LayerKV(None, None, source.keys, source.values)
    elif layout == "concat":
        assert past is not None
        y, present_k, present_v = b.op_multi(
            "Attention", bnsh["q"], bnsh["k"], bnsh["v"], bias, past[0], past[1], outputs=3, **attrs
        )
        kv = LayerKV(present_k, present_v, present_k, present_v)
    else:
        assert past is not None
        present_k = b.op("TensorScatter", past[0], bnsh["k"], masks.write_index, axis=2, name="k_scatter")
        present_v = b.op("TensorScatter", past[1], bnsh["v"], masks.write_index, axis=2, name="v_scatter")
        if layout == "nonpad":  # the whole buffer; keys past nonpad are skipped by the op
            keys, values = present_k, present_v
        else:
            zero, axis = b.const([0], "slot0", "int64"), b.const([2], "seq_axis", "int64")
            keys = b.op("Slice", present_k, zero, masks.total_length, axis)
            values = b.op("Slice", present_v, zero, masks.total_length, axis)
        y = b.op("Attention", bnsh["q"], keys, values, bias, None, None, nonpad, **attrs)
        kv = LayerKV(present_k, present_v, keys, values)
    y = b.op("Transpose", y, perm=[0, 2, 1, 3], name="y_bsnh")
    y = b.op("Reshape", y, b.const([0, 0, dims.num_heads * layer.head_dim], "y_flat", "int64"))
    return y, kv
