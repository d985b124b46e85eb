"""Families whose attention reads one KV head that is both key and value (graph/shared_kv_attention.py)."""

from __future__ import annotations

from types import MappingProxyType

from gqa_export.arch.moe_spec import PER_EXPERT_PROJ, PER_EXPERT_W, MoeNames, MoeSpec
from gqa_export.arch.spec import LM_HEAD_NAMES, ArchSpec, LayerNames, SharedKvAttentionNames, config_keys
from gqa_export.arch.stream_spec import HyperConnectionNames

_COMPRESSED = ("compressed_sparse_attention", "heavily_compressed_attention")
# transformers' save_pretrained (save_original_format, its default) writes the reference layout's names, which its
# conversion_mapping renames back at load: (transformers' spelling, the saved one), each layer tensor read as the
# former; the routed experts are saved one by one (ffn.experts.{e}.w1 / w3 / w2: gate, up, down)
_SAVED_SPELLINGS = (
    ("self_attn.q_a_proj.", "attn.wq_a."),
    ("self_attn.q_a_norm.", "attn.q_norm."),
    ("self_attn.q_b_proj.", "attn.wq_b."),
    ("self_attn.kv_proj.", "attn.wkv."),
    ("self_attn.kv_norm.", "attn.norm."),
    ("self_attn.o_a_proj.", "attn.wo_a."),
    ("self_attn.o_b_proj.", "attn.wo_b."),
    ("self_attn.sinks", "attn.attn_sink"),
    ("self_attn.compressor.kv_proj.", "attn.compressor.wkv."),
    ("self_attn.compressor.gate_proj.", "attn.compressor.wgate."),
    ("self_attn.compressor.position_bias", "attn.compressor.ape"),
    ("self_attn.compressor.kv_norm.", "attn.compressor.norm."),
    ("input_layernorm.", "attn_norm."),
    ("post_attention_layernorm.", "ffn_norm."),
    ("attn_hc.", "hc_attn_"),
    ("ffn_hc.", "hc_ffn_"),
    ("mlp.gate.weight", "ffn.gate.weight"),
    ("mlp.gate.e_score_correction_bias", "ffn.gate.bias"),
    ("mlp.gate.tid2eid", "ffn.gate.tid2eid"),
    ("mlp.experts.", "ffn.experts."),
    ("mlp.shared_experts.gate_proj.", "ffn.shared_experts.w1."),
    ("mlp.shared_experts.up_proj.", "ffn.shared_experts.w3."),
    ("mlp.shared_experts.down_proj.", "ffn.shared_experts.w2."),
)

# the published checkpoints' names (deepseek-ai's release: root-level embed / head / norm / hc_head_fn,
# layers.{i}.attn.wq_a, .attn.wkv, .attn.kv_norm, .attn_sink, .attn.compressor.ape / .norm, .attn.indexer.*,
# .ffn.gate.bias, .ffn.experts.{e}.w1, .hc_attn_fn, .attn_norm, ...): transformers' conversion mapping for
# deepseek_v4, in its order (each of its patterns ending in a letter ends on a name boundary, here `$` or the next
# dot), then its base-model prefix; `head.weight` is read under its own name (lm_head_names, as save_pretrained's
# layout is, so the package's initializer names are the same whichever layout), the routed experts one by one
# (experts.{e}.w1 / w3 / w2, read per expert), the mtp.* layers past the decoder not at all
_PUBLISHED_LAYOUT = (
    (r"\.attn\.", ".self_attn.", False),
    (r"\.ffn\.", ".mlp.", False),
    (r"\.indexer\.compressor\.", ".compressor.indexer.", False),
    (r"^embed\.weight$", "embed_tokens.weight", False),
    (r"^hc_head_(fn|base|scale)$", r"hc_head.hc_\1", False),
    (r"\.attn_norm\.", ".input_layernorm.", False),
    (r"\.ffn_norm\.", ".post_attention_layernorm.", False),
    (r"\.hc_attn_(fn|base|scale)$", r".attn_hc.\1", False),
    (r"\.hc_ffn_(fn|base|scale)$", r".ffn_hc.\1", False),
    (r"\.attn_sink$", ".sinks", False),
    (r"\.indexer\.weights_proj\.", ".compressor.indexer.scorer.weights_proj.", False),
    (r"\.indexer\.wq_b\.", ".compressor.indexer.q_b_proj.", False),
    (r"\.norm\.", ".kv_norm.", False),
    (r"\.ape$", ".position_bias", False),
    (r"\.wq_a\.", ".q_a_proj.", False),
    (r"\.self_attn\.wq_b\.", ".self_attn.q_b_proj.", False),
    (r"\.wkv\.", ".kv_proj.", False),
    (r"\.wgate\.", ".gate_proj.", False),
    (r"\.wo_a\.", ".o_a_proj.", False),
    (r"\.wo_b\.", ".o_b_proj.", False),
    (r"\.q_norm\.", ".q_a_norm.", False),
    (r"\.gate\.bias$", ".gate.e_score_correction_bias", False),
    (r"\.shared_experts\.w1\.", ".shared_experts.gate_proj.", False),
    (r"\.shared_experts\.w2\.", ".shared_experts.down_proj.", False),
    (r"\.shared_experts\.w3\.", ".shared_experts.up_proj.", False),
    (r"^(embed_tokens|norm|hc_head|layers)\.", r"model.\1.", False),  # DeepseekV4ForCausalLM's base model
)

# DeepSeek-V4 (transformers 5.25 DeepseekV4ForCausalLM; docs/coverage.md, section "deepseek_v4"): pre-norm layers
# on hyper-connection copies mixed by Sinkhorn-normalized comb weights; attention with one KV head that is key and
# value (kv_proj, its RMSNorm), q-LoRA with a weightless RMSNorm per head, interleaved RoPE on each head's trailing
# channels ("main" rope on sliding layers, "compress" on CSA / HCA ones), the output rotated back, a sink per head, a
# sliding window on every layer and a grouped low-rank output projection; the CSA / HCA layers' compressed keys
# recomputed each step from cached per-token rows (graph/compressed_kv.py; the context capped at index_topk x the CSA
# rate, within which the lightning indexer keeps every key); every layer's MLP experts on sqrt(softplus) scores (the
# mlp_layer_types "hash_moe" layers choose by a token id -> experts table), their SwiGLU and the shared expert's
# clipped at swiglu_limit.
DEEPSEEK_V4 = ArchSpec(
    name="deepseek_v4",
    layer=LayerNames(o="self_attn.o_b_proj"),
    shared_kv_attention=SharedKvAttentionNames(),
    rope_interleaved=True,
    layer_rope_keys=MappingProxyType({"sliding_attention": "main", **dict.fromkeys(_COMPRESSED, "compress")}),
    attention_sinks="self_attn.sinks",
    hyper_connections=HyperConnectionNames(form="sinkhorn"),
    moe=MoeSpec(
        MoeNames(
            per_expert=(PER_EXPERT_PROJ, PER_EXPERT_W),
            shared_expert="shared_experts",
            expert_bias="gate.e_score_correction_bias",
            hash_table="gate.tid2eid",
        ),
        routing="sqrtsoftplus_biased",
        normalize=True,  # the class always renormalizes (norm_topk_prob is not read)
        activation="swiglu_clipped",
        shared_width="dense",  # intermediate_size, which the config class maps to moe_intermediate_size
        sparse_kinds=("moe", "hash_moe"),
        hashed_kind="hash_moe",
        shared_clipped=True,
    ),
    config_keys=config_keys(num_experts="n_routed_experts"),
    tensor_aliases=_SAVED_SPELLINGS,
    stored_renames=_PUBLISHED_LAYOUT,  # read where the checkpoint has no model.embed_tokens
    lm_head_names=(*LM_HEAD_NAMES, "head.weight"),
    ignore=("norm_topk_prob",),
)

SHARED_KV_FAMILIES = (DEEPSEEK_V4,)
