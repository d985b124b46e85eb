"""What one decoder graph is built with: activation dtype, attention form, I/O variants.

Its own module so that every graph module (decoder, outputs, ...) can read it without importing
the decoder that assembles them.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir


@dataclass(frozen=True)
class GraphOptions:
    io_dtype: ir.DataType  # activations, KV cache, cos/sin
    logits_dtype: ir.DataType
    rope_rows: int  # cos/sin rows: must cover search.max_length
    packed_qkv: bool = True
    packed_gate_up: bool = True  # gate and up as one MatMul + Split; False: two MatMuls
    # gqa | gqa_bias (GQA + attention_bias where a layer needs it, CPU) | scatter (standard Attention
    # on the shared buffer) | concat (standard Attention, growing past)
    mode: str = "gqa"
    sliding_window_cache: bool = False  # gqa only: window-sized KV buffers on windowed layers
    bidirectional_ids: tuple[int, ...] = ()
    bidirectional_layers: str = "all"  # all | sliding: the layers whose bias lets runs attend bidirectionally
    bidirectional_window_bounded: bool = False  # the window still bounds a run's keys on the left
    kv_read: str = "slice"  # scatter graphs: slice (first T slots + bias) | nonpad (whole buffer, nonpad_kv_seqlen)
    fused_rope: bool = True  # GQA: RoPE inside the op where it computes it exactly; False: plain ops always
    # longrope's short/long table switch: "if" (an If node) | "offset" (one concatenated table and a
    # Slice at an offset chosen by the total length, for EPs with no If kernel: docs/eps.md §2.4)
    rope_switch: str = "if"
    # Outputs and inputs for pipelines (io.py): `logits` all | last (the prompt pass computes the
    # last position's logits only) | none (no lm_head: `hidden_states` instead); `inputs_embeds`
    # replaces input_ids and the embedding; `hidden_states` adds the final norm's output.
    logits: str = "all"
    inputs_embeds: bool = False
    embeds_with_ids: bool = False  # with inputs_embeds: input_ids too, for the masks that read them
    hidden_states: bool = False
    # `position_ids` [3, B, S] (t, h, w per token) drive the rope per mrope_section (graph/mrope.py)
    mrope_positions: bool = False
    # inputs_embeds carries k more hidden-wide slices, slice j added after layer j - 1 (graph/layer_features.py)
    layer_feature_slices: int = 0
    # module names (q_proj, down_proj, ...) whose linears get LoRA graph inputs (graph/lora.py)
    lora_targets: tuple[str, ...] = ()
