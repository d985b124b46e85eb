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
    lm_head_names=(*LM_HEAD_NAMES, "head.weight"),
    ignore=("norm_topk_prob",),
)

SHARED_KV_FAMILIES = (DEEPSEEK_V4,)
