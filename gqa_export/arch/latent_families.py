"""Families with multi-head latent attention (DeepSeek-V2, -V2-Lite, -V3, and those built on them:
MiniCPM3, Sarvam-MLA, GLM-4-MoE-Lite, DeepSeek-V3.2, LongCat-Flash, Youtu, A.X-K1,
GLM-MoE-DSA, dots3-note, A.X-K2, HunYuan-V4, Mistral-4, Mistral-Large-4), kept apart from families.py so
that neither module outgrows its budget; `families.ALL` lists them."""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.spec import (
    STRAY_WINDOW,
    ArchSpec,
    LatentAttentionNames,
    LayerNames,
    MoeNames,
    MoeSpec,
    Refusal,
    config_keys,
)
from gqa_export.arch.stream_spec import HyperConnectionNames

# the config spellings both DeepSeek generations share: dense layers before first_k_dense_replace,
# n_shared_experts shared experts as one MLP of that many times moe_intermediate_size
# n_routed_experts: the key both majors have (4.57 has no num_experts alias for it)
_DEEPSEEK_KEYS = config_keys(first_dense_layers="first_k_dense_replace", num_experts="n_routed_experts")
_SHARED = MoeNames(shared_expert="shared_experts")
# DeepSeek-V2 / V2-Lite: latent attention (q-LoRA optional: V2-Lite has none), GPT-J pairs on the
# decoupled rope dims, softmax router with group-limited greedy top-k (docs/latent-attention.md),
# computed in fp32 as HF does
DEEPSEEK_V2 = ArchSpec(
    name="deepseek_v2",
    latent_attention=LatentAttentionNames(),
    rope_interleaved=True,
    moe=MoeSpec(
        _SHARED,
        routing="softmax_group_limited",
        shared_width="per_expert",
        router_dtype="float32",
        layer_rules=("first_dense_layers",),
    ),
    config_keys=_DEEPSEEK_KEYS,
    refusals=(STRAY_WINDOW,),
)
# DeepSeek-V3: the same latent attention (rope pairs interleaved unless rope_interleave is false),
# a sigmoid router whose e_score_correction_bias steers grouped top-k selection
DEEPSEEK_V3 = ArchSpec(
    name="deepseek_v3",
    latent_attention=LatentAttentionNames(),
    rope_interleaved=True,
    moe=MoeSpec(
        MoeNames(shared_expert="shared_experts", expert_bias="gate.e_score_correction_bias"),
        routing="sigmoid_group_biased",
        shared_width="per_expert",  # n_shared_experts experts' widths
        router_dtype="float32",  # F.linear(x.float(), W.float()), weight and bias kept fp32
        layer_rules=("first_dense_layers",),
    ),
    config_keys=_DEEPSEEK_KEYS,
    refusals=(STRAY_WINDOW,),
)
# MiniCPM3 (transformers 5.24 MiniCPM3ForCausalLM): DeepseekV2Attention's modules (q-LoRA, the latent
# norms at eps 1e-6) with rotate-half RoPE on the rope dims (apply_rotary_pos_emb; the class reads no
# rope_interleave) in Llama's dense layers, and three scales: the embedding times scale_emb (Gemma-3's
# scaled table), each block's output times scale_depth / sqrt(num_hidden_layers), the final hidden
# states divided by hidden_size / dim_model_base (the config's logits_scaling) before the lm_head
MINICPM3 = replace(
    DEEPSEEK_V2,
    name="minicpm3",
    rope_interleaved=False,
    moe=None,
    embedding_scale="config_in_table",  # inputs_embeds arrive scaled, as from Gemma's table
    residual_scale="depth",
    config_keys=config_keys(embedding_multiplier="scale_emb"),
    ignore=("rope_interleave",),
)
# Sarvam-MLA (sarvam-105b): transformers 5.24 runs it as DeepseekV3ForCausalLM; only its config class
# differs, translating the remote code's spellings at load (num_experts / num_shared_experts through
# its attribute_map, rope_scaling type "deepseek_yarn" as YaRN, a head_dim of kv_lora_rank +
# qk_rope_head_dim and q_head_dim dropped), so the export reads what DeepSeek-V3 reads
SARVAM_MLA = replace(DEEPSEEK_V3, name="sarvam_mla")
# GLM-4-MoE-Lite (GLM-4.7-Flash): DeepseekV3Attention (q-LoRA, pairs or halves per rope_interleave,
# YaRN mscale) with GLM-4-MoE's router, which is DeepSeek-V3's (sigmoid scores, groups ranked by their
# two best biased scores, fp32); the experts sit where the config's mlp_layer_types says "sparse" (its
# class fills the list in, dense first, and reads no first_k_dense_replace)
GLM4_MOE_LITE = replace(
    DEEPSEEK_V3,
    name="glm4_moe_lite",
    moe=replace(DEEPSEEK_V3.moe, layer_rules=("mlp_layer_types",)),  # type: ignore[arg-type]
    config_keys=config_keys(num_experts="n_routed_experts"),
)
# DeepSeek-V3.2 (DeepseekV32ForCausalLM): DeepSeek-V3's latent attention (q-LoRA always, rope pairs
# always: its config has no rope_interleave) and router, experts by mlp_layer_types (its config fills
# the list from first_k_dense_replace), plus a lightning indexer keeping the top index_topk keys per
# query; within index_topk keys it keeps all of them, the layer is plain MLA and the indexer's weights
# are not read: the package's context is capped there (model/latent.py, docs/latent-attention.md)
DEEPSEEK_V32 = replace(GLM4_MOE_LITE, name="deepseek_v32", ignore=("rope_interleave",))
# LongCat-Flash (transformers 5.24 LongcatFlashForCausalLM, docs/latent-attention.md): each stored layer
# is two sublayers (graph layers 2i, 2i + 1, one KV cache each) of DeepSeek-V3's MLA (q-LoRA always,
# rope pairs, the query and the normed latent times sqrt(hidden / rank)) and a dense SwiGLU MLP, plus
# one shortcut MoE: on the first sublayer's post-attention normed input, added after the second's
# MLP. Its router: softmax over the real and the zero (identity) experts in fp32, the top k of the
# probabilities plus e_score_correction_bias, weighted by the probabilities, not renormalized, times
# routed_scaling_factor. HF's router never adds the classifier's bias; its rope tables are head_dim wide
_SUB = "self_attn.{s}."
LONGCAT_FLASH = replace(
    DEEPSEEK_V3,
    name="longcat_flash",
    layer=LayerNames(
        input_norm="input_layernorm.{s}",
        post_attention_norm="post_attention_layernorm.{s}",
        o=f"{_SUB}o_proj",
        gate="mlps.{s}.gate_proj",
        up="mlps.{s}.up_proj",
        down="mlps.{s}.down_proj",
    ),
    latent_attention=LatentAttentionNames(
        q=f"{_SUB}q_proj",
        q_a=f"{_SUB}q_a_proj",
        q_a_norm=f"{_SUB}q_a_layernorm",
        q_b=f"{_SUB}q_b_proj",
        kv_a=f"{_SUB}kv_a_proj_with_mqa",
        kv_a_norm=f"{_SUB}kv_a_layernorm",
        kv_b=f"{_SUB}kv_b_proj",
    ),
    latent_lora_scale=True,
    sublayers=2,
    moe=MoeSpec(
        MoeNames(routers=("router.classifier",), expert_bias="router.e_score_correction_bias"),
        routing="softmax_biased",
        router_dtype="float32",  # F.linear(x.float(), W.float()) and the choice in fp32
        shortcut=True,
    ),
    config_keys=config_keys(),
    ignore=("rope_interleave", "norm_topk_prob"),  # the class always rotates pairs, never renormalizes
    refusals=(
        Refusal("router_bias", "LongCat-Flash's router bias is a tensor HF's router never adds; export without it"),
        Refusal(
            "head_dim",
            "LongCat-Flash's rope tables are head_dim wide and turn the qk_rope_head_dim channels: "
            "transformers runs only equal values",
            differs_from="qk_rope_head_dim",
        ),
    ),
)
# Youtu-LLM (transformers 5.25 YoutuForCausalLM): DeepseekV3Attention unchanged (q-LoRA optional, latent
# norms at eps 1e-6, pairs or halves per rope_interleave, YaRN mscale) in Llama's pre-norm layers with
# Qwen3's dense SwiGLU MLP, no experts (its config class removes every MoE key); tied embeddings by default
YOUTU = replace(DEEPSEEK_V3, name="youtu", moe=None, config_keys=config_keys())
# A.X-K1 (transformers 5.25 AXK1ForCausalLM): DeepSeek-V3's latent attention with q-LoRA always, rope
# pairs or halves per rope_interleave, V3's grouped sigmoid router in fp32 and shared experts on the
# "sparse" layers of mlp_layer_types (its config fills the list from first_k_dense_replace /
# moe_layer_freq), and one change: the sparse block's output (routed + shared) goes through an RMSNorm
# (post_mlp_layernorm, rms_norm_eps) before the residual add. The hub stores that norm at the layer
# (dense layers hold one too, which the class never reads); transformers renames it under mlp. at load
_GLM4_MOE_LITE_MOE = GLM4_MOE_LITE.moe
assert _GLM4_MOE_LITE_MOE is not None
AXK1 = replace(
    GLM4_MOE_LITE,
    name="axk1",
    moe=replace(
        _GLM4_MOE_LITE_MOE,
        names=replace(_GLM4_MOE_LITE_MOE.names, output_norm="post_mlp_layernorm|mlp.post_mlp_layernorm"),
    ),
)
# GLM-MoE-DSA (GLM-5, transformers 5.25 GlmMoeDsaForCausalLM): DeepSeek-V3.2 whose attention is A.X-K1's
# (q-LoRA always, rope pairs always: no rope_interleave) and whose indexer (pairs too) runs on the "full"
# layers of indexer_types while the "shared" ones reuse the previous full layer's top-k; within
# index_topk keys every selection keeps every visible key, so V3.2's policy holds: plain MLA, the
# indexers' weights not read, the package's context capped at index_topk (model/latent.py)
GLM_MOE_DSA = replace(DEEPSEEK_V32, name="glm_moe_dsa")

# dots3-note's decoder (transformers 5.25 Dots3NoteForCausalLM, docs/latent-attention.md): DeepSeek-V3.2's MLA
# (rope pairs always, GLM-MoE-DSA's indexer on the indexed_attention layers, the same index_topk cap) whose
# sliding_attention layers (a window) have their own heads and widths (per_layer_config: LayerDims.attention),
# LongCat-Flash's lora scales (HF scales the normed query latent before q_b_proj: the same product), every latent
# norm at rms_norm_eps, an RMSNorm on the shared rope key before RoPE, each head's output times
# sigmoid(g_proj(x)) before o_proj, and the softmax scale (qk_nope + qk_rope) ** -0.5 per layer (no mscale
# read: its rope parameters are per layer type); the shared expert shared_experts_intermediate_size x n_shared
DOTS3_NOTE_TEXT = replace(
    DEEPSEEK_V32,
    name="dots3_note_text",
    refusals=(),  # its class windows the sliding layers
    latent_attention=LatentAttentionNames(rope_key_norm="self_attn.k_rope_only_layernorm", config_norm_eps=True),
    layer=replace(DEEPSEEK_V32.layer, output_gate="self_attn.g_proj"),
    latent_lora_scale=True,
    moe=replace(DEEPSEEK_V32.moe, shared_width="config_per_count"),  # type: ignore[arg-type]
    config_keys=config_keys(
        num_experts="n_routed_experts", shared_expert_intermediate_size="shared_experts_intermediate_size"
    ),
)
# A.X-K2 (transformers 5.25 AXK2ForCausalLM, docs/coverage.md): DeepSeek-V3.2 (rope pairs always, V3's sigmoid
# router, here with n_group null: one group, the biased choice over every expert; the indexer on every
# indexed_attention layer, under V3.2's index_topk cap) with three changes. q_b (the hub's q_b_proj,
# transformers' q_gate_proj) reads [q_a_layernorm(q_a) | q_a] and yields per head [query | gate], the gate's
# sigmoid scaling each value channel of the attention output before o_proj; input_layernorm on every layer and
# post_attention_layernorm on the sparse ones are GatedRMSNorms, y * sigmoid(W_up(silu(W_down(y)))) with
# y = RMSNorm(x) (transformers: mlp.fc1 / mlp.fc2), the dense layers' post_attention_layernorm plain
_GATED_NORM_ALIASES = tuple(
    (f"{norm}.{hub}.", f"{norm}.mlp.{v5}.")
    for norm in ("input_layernorm", "post_attention_layernorm")
    for hub, v5 in (("W_down", "fc1"), ("W_up", "fc2"))
)
AXK2 = replace(
    DEEPSEEK_V32,
    name="axk2",
    latent_attention=LatentAttentionNames(q_b_input=("normed", "raw"), value_gate=True),
    layer=replace(DEEPSEEK_V32.layer, gated_norms=("norm", "W_down", "W_up")),
    tensor_aliases=(("self_attn.q_b_proj.", "self_attn.q_gate_proj."), *_GATED_NORM_ALIASES),
)
# HunYuan-V4 (transformers 5.25 HYV4ForCausalLM, docs/coverage.md): GLM-MoE-DSA's MLA (rope pairs, the indexer on
# the "full" layers of indexer_types, the "shared" ones reusing the previous choice: V3.2's index_topk cap) and
# router (sigmoid + selection bias, one group), with a learned sink logit per head (eager softmax over [scores |
# sink]), each value channel of the attention output times sigmoid(gate_proj(x)) of the normed input, routed
# experts' SwiGLU clamped at swiglu_limit (gate above, up both ways: MoE's own clip), and hyper-connection
# residual copies without comb (graph/hyper_connections.py). The hub spells the sink learnable_sink_param, every
# gate_proj linear_gate and the stream maps hc_pre.hc_attn_layer.hc_* / hc_pre.hc_mlp_layer.hc_*
HY_V4 = replace(
    GLM_MOE_DSA,
    name="hy_v4",
    latent_attention=LatentAttentionNames(value_gate_proj="self_attn.gate_proj"),
    attention_sinks="self_attn.sinks|self_attn.learnable_sink_param",
    hyper_connections=HyperConnectionNames(),
    moe=replace(_GLM4_MOE_LITE_MOE, activation="swiglu_clipped"),
    tensor_aliases=(
        ("self_attn.gate_proj.", "self_attn.linear_gate."),
        ("mlp.gate_proj.", "mlp.linear_gate."),
        ("mlp.shared_experts.gate_proj.", "mlp.shared_experts.linear_gate."),
        ("attn_hc.", "hc_pre.hc_attn_layer.hc_"),
        ("ffn_hc.", "hc_pre.hc_mlp_layer.hc_"),
    ),
)
# Mistral-4 (Mistral-Small-4, transformers 5.25 Mistral4ForCausalLM, docs/coverage.md "mistral4"): DeepSeek-V3's
# latent attention (q-LoRA optional, pairs or halves per rope_interleave, YaRN mscale) with every query (nope and
# rope channels) times Ministral-3's 1 + llama_4_scaling_beta * log(1 + floor(pos / original_max_position_embeddings))
# (spec query_position_scale), and a router that is V3's group choice on softmax probabilities without a selection
# bias, in the model's dtype (routing softmax_grouped); shared experts, dense first_k_dense_replace layers
MISTRAL4 = replace(
    DEEPSEEK_V3,
    name="mistral4",
    query_position_scale=True,
    moe=MoeSpec(_SHARED, routing="softmax_grouped", shared_width="per_expert", layer_rules=("first_dense_layers",)),
)
# Mistral-Large-4's decoder (transformers 5.25 MistralLarge4TextModel inside MistralLarge4ForConditionalGeneration, read
# --text-only; docs/coverage.md "mistral_large4"): GLM-MoE-DSA's MLA without q-LoRA (q_proj; latent norm at
# rms_norm_eps; rope pairs; V3.2's index_topk cap, the indexers unread) plus: NoPE layers (no_rope_layers 0) whose
# rope channels fold into the nope ones (model/latent.py); LeRoPE, the inverse frequencies times exp(rotary_emb.alpha);
# each head's query times scale_h * log(pos + 1) + bias_h; layers that attend over an earlier layer's latent cache
# (kv_source_layers: the latent cache's GQA shared-KV read, as Gemma-4's shared layers); Mistral-4's router in fp32,
# always renormalized; the final logits soft-capped (final_logit_softcapping)
# transformers' "mistral_large4" and "mistral_large4_text" conversion mappings, the decoder's part, in their order: the
# hub's Mistral-native names (tok_embeddings, layers.{i}.attention.wq, experts.{e}.w1, ssmax_scaling.s, lerope.alpha)
_MISTRAL_LARGE4_LAYOUT = (
    (r"^tok_embeddings\.", "model.language_model.embed_tokens.", False),
    (r"^lerope\.alpha$", "model.language_model.rotary_emb.alpha", False),
    (r"^layers\.", "model.language_model.layers.", False),
    (r"^norm\.", "model.language_model.norm.", False),
    (r"^output\.", "lm_head.", False),
    (r"\.wo\.", ".o_proj.", False),
    (r"\.(feed_forward|shared_experts)\.w1\.", r".\1.gate_proj.", False),
    (r"\.(feed_forward|shared_experts)\.w2\.", r".\1.down_proj.", False),
    (r"\.(feed_forward|shared_experts)\.w3\.", r".\1.up_proj.", False),
    (r"\.attention\.", ".self_attn.", False),
    (r"\.wq\.", ".q_proj.", False),
    (r"\.wkv_a_with_mqa\.", ".kv_a_proj_with_mqa.", False),
    (r"\.wkv_b\.", ".kv_b_proj.", False),
    (r"\.attention_norm\.", ".input_layernorm.", False),
    (r"\.ffn_norm\.", ".post_attention_layernorm.", False),
    (r"\.kv_a_norm\.", ".kv_a_layernorm.", False),
    (r"\.feed_forward\.", ".mlp.", False),
    (r"\.gate\.", ".mlp.gate.", False),
    (r"\.experts\.", ".mlp.experts.", False),
    (r"\.shared_experts\.", ".mlp.shared_experts.", False),
    (r"\.ssmax_scaling\.s$", ".softmax_scaling.scale", False),
    (r"\.ssmax_scaling\.b$", ".softmax_scaling.bias", False),
    # the routed experts' w1 / w3 / w2, which transformers merges into gate_up_proj / down_proj
    (r"\.experts\.(\d+)\.w1\.", r".experts.\1.gate_proj.", False),
    (r"\.experts\.(\d+)\.w3\.", r".experts.\1.up_proj.", False),
    (r"\.experts\.(\d+)\.w2\.", r".experts.\1.down_proj.", False),
)
MISTRAL_LARGE4_TEXT = replace(
    GLM_MOE_DSA,
    name="mistral_large4_text",
    latent_attention=LatentAttentionNames(
        config_norm_eps=True,
        query_log_scale="self_attn.softmax_scaling",
        rope_frequency_scale="rotary_emb.alpha",
    ),
    moe=MoeSpec(_SHARED, routing="softmax_grouped", shared_width="per_expert", router_dtype="float32", normalize=True),
    stored_renames=_MISTRAL_LARGE4_LAYOUT,  # read where the checkpoint has no model.language_model.embed_tokens
)
LATENT_FAMILIES = (
    DEEPSEEK_V2, DEEPSEEK_V3, MINICPM3, SARVAM_MLA, GLM4_MOE_LITE, DEEPSEEK_V32, LONGCAT_FLASH, YOUTU, AXK1,
    GLM_MOE_DSA, DOTS3_NOTE_TEXT, AXK2, HY_V4, MISTRAL4, MISTRAL_LARGE4_TEXT,
)  # fmt: skip
