"""Families with chunked local attention (Llama-4's text decoder).

Llama-4 (models/llama4/modeling_llama4.py, transformers 5.24): pre-norm Llama layers whose RoPE
layers attend only within chunks of attention_chunk_size positions (a query sees the earlier keys
of its own chunk), every no_rope_layer_interval-th layer a global NoPE layer whose queries get
attention temperature tuning, RoPE as complex products of channel pairs (2i, 2i + 1), a scaleless
RMSNorm of q and k after RoPE on RoPE layers only (use_qk_norm), dense MLPs intermediate_size_mlp
wide, and experts on the moe_layers: a top-k sigmoid router whose score scales each chosen
expert's input, experts stored as transposed [gate | up] halves, and a shared expert
intermediate_size wide. The multimodal class's decoder sits under `language_model.model.`
(arch/spec.py's DECODER_PREFIXES); its vision tower is never read.
"""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec, LayerNames, MoeNames, MoeSpec, config_keys

LLAMA4 = ArchSpec(
    name="llama4",
    qk_norm="scaleless",
    qk_norm_layers="rope",
    qk_norm_after_rope=True,
    nope_query_temperature=True,
    rope_interleaved=True,
    rope_types=("default", "linear", "llama3"),
    layer=LayerNames(gate="feed_forward.gate_proj", up="feed_forward.up_proj", down="feed_forward.down_proj"),
    moe=MoeSpec(
        MoeNames(
            blocks=("feed_forward.",),
            routers=("router",),
            per_expert=(),
            fused=(),
            transposed=("experts.gate_up_proj", "experts.down_proj"),
            transposed_order="halves",
            shared_expert="shared_expert",
        ),
        routing="sigmoid_scaled_input",
        normalize=True,  # top-1 through the MoE op: its one weight renormalized is exactly 1
        shared_width="dense",
        layer_rules=("sparse_layers",),
    ),
    # the dense layers' MLP is intermediate_size_mlp wide; intermediate_size is the experts' width
    config_keys=config_keys(intermediate_size="intermediate_size_mlp"),
)

CHUNKED = (LLAMA4,)
