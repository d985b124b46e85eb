"""Decoders of multimodal classes (arch/wrapped_decoders.py) that are an exported family's decoder with
one difference: published under names of their own (the family's spec with the stored names
transformers' loader rewrites, source/stored_renames.py, or another decoder root), or one mechanism
swapped for another the project already builds (latent norms' eps, rope halves for pairs, plain
attention for latent attention, a plain relu2 MLP). Each is read from its modeling code in
transformers 5.25 and held against its class (docs/coverage.md §21).

Cosmos3-Omni (Cosmos3OmniForConditionalGeneration, transformers 5.25) is Qwen3-VL's class: its decoder
is Qwen3's (q/k RMSNorm per head) under M-RoPE, whose three axes carry the same positions on a text-only
prompt (plain RoPE; the deepstack visual adds come with images only). Its unified checkpoints store the
decoder at the root (`layers.*`, `embed_tokens`, `norm`; the tower as `blocks.*`, `merger.*`) with
Diffusers-style attention names (`to_q` / `to_k` / `to_v` / `to_out`, `norm_q` / `norm_k`), which
transformers' conversion mapping rewrites to Qwen3-VL's at load.

HY-V4-VL (HYV4VLForConditionalGeneration) runs HunYuan-V4's decoder (hy_v4_vl_text, its hub names HY-V4's)
with two changes: every latent norm (q_a_layernorm, kv_a_layernorm) at the config's rms_norm_eps (HY-V4's at
1e-6), and Qwen3-VL's interleaved M-RoPE over the rope slice, plain RoPE on a text-only prompt (its three
axes the same arange; the newline-per-row image positions come with images only).

ERNIE-4.5-VL (Ernie4_5_VLMoeForConditionalGeneration) runs ERNIE-4.5-MoE's decoder whose sparse layers hold a text and
a vision expert set: a text prompt runs the text set only, read as data (its names, the hub's router and bias rows
through row_views, its width out of a [text, vision] pair), docs/coverage.md §30.
"""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.biased_routing_families import ERNIE4_5_MOE
from gqa_export.arch.families import ERNIE4_5, GEMMA2, LLAMA, PHI3, QWEN3
from gqa_export.arch.latent_families import DEEPSEEK_V2, DEEPSEEK_V3, HY_V4
from gqa_export.arch.moe_spec import PER_EXPERT_PROJ, MoeNames, MoeSpec
from gqa_export.arch.row_views import chunked, joined
from gqa_export.arch.sigmoid_router_families import LAGUNA
from gqa_export.arch.spec import DECODER_PREFIXES, LM_HEAD_NAMES, ArchSpec, ConfigChoice, LayerNames, config_keys

# transformers' "cosmos3_omni" conversion mapping, the decoder's part (in, out, transposed)
_COSMOS3_OMNI_LAYOUT = (
    (r"^(layers\.|embed_tokens\.|norm\.)", r"model.language_model.\1", False),
    (r"\.self_attn\.to_q\.", ".self_attn.q_proj.", False),
    (r"\.self_attn\.to_k\.", ".self_attn.k_proj.", False),
    (r"\.self_attn\.to_v\.", ".self_attn.v_proj.", False),
    (r"\.self_attn\.to_out\.", ".self_attn.o_proj.", False),
    (r"\.self_attn\.norm_q\.", ".self_attn.q_norm.", False),
    (r"\.self_attn\.norm_k\.", ".self_attn.k_norm.", False),
)
COSMOS3_OMNI_TEXT = replace(QWEN3, name="cosmos3_omni_text", stored_renames=_COSMOS3_OMNI_LAYOUT)

# HY-V4-VL's decoder: HY-V4 with its latent norms at rms_norm_eps (LatentAttentionNames.config_norm_eps)
HY_V4_VL_TEXT = replace(
    HY_V4, name="hy_v4_vl_text", latent_attention=replace(HY_V4.latent_attention, config_norm_eps=True)
)

# Cosmos3-Edge's decoder (cosmos3_edge_text): Llama's attention and norms with a plain two-projection MLP
# (fc1 -> relu2 -> fc2, no gate), its M-RoPE plain RoPE on a text prompt; the hub keeps it at the root with
# Diffusers-style attention names and the MLP as up_proj / down_proj (transformers' "cosmos3_edge" mapping).
# The generator branch's tensors (action / time embedders, *_moe_gen layers) are not read.
_COSMOS3_EDGE_LAYOUT = (
    *_COSMOS3_OMNI_LAYOUT[:5],
    (r"\.mlp\.up_proj\.", ".mlp.fc1.", False),
    (r"\.mlp\.down_proj\.", ".mlp.fc2.", False),
)
COSMOS3_EDGE_TEXT = replace(
    LLAMA,
    name="cosmos3_edge_text",
    mlp="plain",
    activations=("relu2",),
    layer=LayerNames(up="mlp.fc1", down="mlp.fc2"),
    stored_renames=_COSMOS3_EDGE_LAYOUT,
)

# PaddleOCR-VL's decoder (paddleocr_vl_text): ERNIE-4.5's layers under Qwen2.5-Omni's attention, whose
# M-RoPE rotates halves (apply_multimodal_rotary_pos_emb), where ERNIE-4.5 rotates GPT-J pairs; plain
# rotate-half RoPE on a text prompt (the three axes carry the same positions)
PADDLEOCR_VL_TEXT = replace(ERNIE4_5, name="paddleocr_vl_text", rope_interleaved=False)

# Emu3's decoder (emu3_text_model): Llama's, stored under text_model.model. with its head text_model.lm_head
# in the released layout (transformers' "emu3" mapping moves them under model.text_model. and lm_head)
EMU3_TEXT = replace(
    LLAMA,
    name="emu3_text",
    decoder_prefixes=(*DECODER_PREFIXES, "text_model.model."),
    lm_head_names=(*LM_HEAD_NAMES, "text_model.lm_head.weight"),
)

# DeepSeek-OCR-2's decoder (deepseek_ocr2_text; Unlimited-OCR's too): DeepSeek-V2's experts (softmax router,
# greedy or group-limited top-k, shared experts, dense layers by mlp_layer_types) under Llama's attention
# (plain q/k/v/o heads, rotate-half RoPE) in place of latent attention
DEEPSEEK_OCR2_TEXT = replace(
    DEEPSEEK_V2,
    name="deepseek_ocr2_text",
    latent_attention=None,
    rope_interleaved=False,
    moe=replace(DEEPSEEK_V2.moe, layer_rules=("mlp_layer_types", "first_dense_layers")),  # type: ignore[arg-type]
    refusals=(),  # its attention reads sliding_window (DeepSeek-V2's latent attention does not)
)

# Kimi-K2.5's decoder: DeepSeek-V3's, but its class replaces the image and video placeholder ids by id 0 before
# the embedding lookup (Kimi_K25Model.forward), so a prompt holding them embeds row 0 there (the package too)
KIMI_K25_TEXT = replace(
    DEEPSEEK_V3, name="kimi_k25_text", placeholder_keys=("image_token_id", "video_token_id"), placeholder_row=0
)

# Molmo2's decoder (molmo2_text): Qwen3's layers whose config chooses the q/k norms (qk_norm_type "qwen3": per head,
# "olmo": over all heads' channels, OLMo-2's) and the layer's norms (norm_after: OLMo-2's post-norm layout, the
# attention's output normed by input_layernorm and the MLP's by post_attention_layernorm); the layers outside
# rope_scaling_layers run the rope unscaled (config key scaled_rope_layers), the embedding holds
# additional_vocab_size rows past the lm_head's vocab_size (extra_vocab_rows), and its default rope rotates
# the whole head
_MOLMO2_POST = replace(
    QWEN3.layer,
    input_norm=None,
    post_attention_norm="input_layernorm",
    post_feedforward_norm="post_attention_layernorm",
)
# Its releases keep the decoder under `model.transformer.` with the OLMo-style names (blocks, attn_norm / ff_norm,
# att_proj = [q | k | v], attn_out, ff_proj = [up | gate], ff_out, ln_f) and the embedding as two tables, the
# vocabulary's and the additional rows (transformers' "molmo2" and "Molmo2TextModel" conversion mappings)
_MOLMO2_EMBED = "model.language_model.embed_tokens.weight"
_MOLMO2_LAYOUT = (
    (r"^model\.transformer\.blocks\.", "model.language_model.layers.", False),
    (r"^model\.transformer\.ln_f\.", "model.language_model.norm.", False),
    (r"\.attn_norm\.", ".input_layernorm.", False),
    (r"\.ff_norm\.", ".post_attention_layernorm.", False),
    (r"\.self_attn\.attn_out\.", ".self_attn.o_proj.", False),
    (r"\.mlp\.ff_out\.", ".mlp.down_proj.", False),
)
MOLMO2_TEXT = replace(
    QWEN3,
    name="molmo2_text",
    default_rope_whole_head=True,
    stored_renames=_MOLMO2_LAYOUT,
    stored_qkv="self_attn.att_proj",
    split_projections=(("mlp.ff_proj", ("mlp.up_proj", "mlp.gate_proj")),),
    row_views=(  # the vocabulary's rows, then the additional ones (transformers' Concatenate on load)
        joined(r"^model\.transformer\.wte\.embedding$", _MOLMO2_EMBED, "model.transformer.wte.new_embedding"),
    ),
    config_choices=(
        ConfigChoice("qk_norm_type", {"qwen3": {"qk_norm": "head"}, "olmo": {"qk_norm": "full"}}),
        ConfigChoice("norm_after", {False: {}, True: {"norm_layout": "post", "layer": _MOLMO2_POST}}),
    ),
)

# Chameleon's decoder (ChameleonForConditionalGeneration, the type's only class): Llama's layers with q/k
# LayerNorms per head ([heads, D] weight and bias tables, statistics over head_dim at the module's own 1e-5),
# the image tokens' logits masked, and where the config sets swin_norm (ChameleonSwinDecoderLayer) the layer's two
# norms after their blocks: h + input_layernorm(attention(h)), then h + post_attention_layernorm(mlp(h)), the
# "post" layout (a config choice, as Molmo2's norm_after)
_CHAMELEON_LAYER = LayerNames(q_norm="self_attn.q_norm", k_norm="self_attn.k_norm")
_CHAMELEON_SWIN = replace(
    _CHAMELEON_LAYER,
    input_norm=None,
    post_attention_norm=_CHAMELEON_LAYER.input_norm,
    pre_feedforward_norm=None,
    post_feedforward_norm=_CHAMELEON_LAYER.post_attention_norm,
)
CHAMELEON = replace(
    LLAMA,
    name="chameleon",
    qk_norm="head_layer",
    qk_norm_eps=1e-5,
    masked_logits=("vocabulary_map", "IMGIMG"),
    head_dim_from_hidden=True,
    layer=_CHAMELEON_LAYER,
    config_choices=(ConfigChoice("swin_norm", {False: {}, True: {"norm_layout": "post", "layer": _CHAMELEON_SWIN}}),),
)

# Phi-4-multimodal's decoder (phi4_multimodal, its config the class's): Phi-3's. Its remote-code release
# (model_type phi4mm, Phi4MMForCausalLM) stores each LoRA-wrapped projection's weight as `<proj>.base_layer.weight`
# beside its vision / speech adapters (`<proj>.lora_A.vision.weight`, ...); its forward unsets both adapters on a
# text-only prompt (InputMode.LANGUAGE), so the base weights are read and the adapters are not
# (transformers' convert_phi4_multimodal_weights_to_hf.py drops them and `base_layer.` the same way)
PHI4_MULTIMODAL_TEXT = replace(
    PHI3,
    name="phi4_multimodal_text",
    tensor_aliases=tuple(
        (f"{proj}.", f"{proj}.base_layer.")
        for proj in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    ),
)

# ERNIE-4.5-VL's decoder (ernie4_5_vl_moe_text): ERNIE-4.5-MoE's layers (softmax router choosing on probs + the
# moe_statics bias, renormalized over max(sum, moe_norm_min), shared experts, GPT-J RoPE) whose sparse layers hold a
# text and a vision expert set side by side, each with its own router and bias row; a prompt without
# moe_mm_token_type_ids (a text prompt) runs every token through the text set (Ernie4_5_VLMoeMoeBlock), the shared
# experts moe_intermediate_size[0] x moe_num_shared_experts wide. Its 3D RoPE is GPT-J RoPE on a text prompt (the
# three axes the same arange: the pre-rotated h / w frequencies recomposed interleave back to inv_freq's order).
# transformers 5.x names the text set mlp.text_moe.* ([E, 2I, H] / [E, H, I] experts, its router [E, H], its bias
# [1, E]); the hub keeps the 2E experts per expert (text first: mlp.experts.0 .. E-1), the routers transposed
# ([H, E]: mlp.gate.weight the text one, mlp.gate.weight_1 the vision one) and one moe_statics bias [2, E] whose
# rows are the text set's and the vision set's (transformers' "ernie4_5_vl_moe" conversion mapping)
_ERNIE_VL_TEXT_SET = "text_moe."
ERNIE4_5_VL_TEXT = replace(
    ERNIE4_5_MOE,
    name="ernie4_5_vl_moe_text",
    moe=replace(
        ERNIE4_5_MOE.moe,
        names=MoeNames(
            routers=(f"{_ERNIE_VL_TEXT_SET}gate",),
            per_expert=(PER_EXPERT_PROJ,),  # the hub's experts 0 .. E-1: the text set
            fused=((f"{_ERNIE_VL_TEXT_SET}experts.gate_up_proj", f"{_ERNIE_VL_TEXT_SET}experts.down_proj"),),
            shared_expert="shared_experts",
            expert_bias=f"{_ERNIE_VL_TEXT_SET}gate.moe_statics.e_score_correction_bias",
        ),
        expert_set=0,  # moe_intermediate_size [text, vision]
        layer_rules=("mlp_layer_types",),
    ),
    row_views=(
        *chunked(r"\.mlp\.gate\.weight$", ".mlp.text_moe.gate.weight", transposed=True),
        *chunked(r"\.mlp\.gate\.weight_1$", ".mlp.vision_moe.gate.weight", transposed=True),
        *chunked(
            r"\.mlp\.moe_statics\.e_score_correction_bias$",
            ".mlp.text_moe.gate.moe_statics.e_score_correction_bias",
            ".mlp.vision_moe.gate.moe_statics.e_score_correction_bias",
        ),
    ),
)

# Muse-Glimmer's decoder (muse_glimmer_text, MuseGlimmerForConditionalGeneration; its text type has no causal-LM
# class): Gemma-2's sandwich layers, every layer norm (1 + w) ("centered"), the post-block ones at post_norm_eps,
# with AFMoE's per-channel output gate (sigmoid(self_attn.gate_proj(x)) on the heads before o_proj), scaleless
# q/k RMSNorms over head_dim and the query times qk_scale_factor (a score factor on top of head_dim ** -0.5), a
# SwiGLU MLP (hidden_activation), NoPE where layer_rope_theta is 0 (the others at the global theta); the
# embedding table's rows through a weightless RMSNorm (no sqrt(hidden) scale), the final norm a plain w, the
# logits times output_multiplier before Gemma-2's final softcap. Its class embeds the image and video placeholder
# ids as id 0 (MuseGlimmerModel.forward), as Kimi-K2.5's does
MUSE_GLIMMER_TEXT = replace(
    GEMMA2,
    name="muse_glimmer_text",
    activations=("silu",),
    embedding_scale="none",
    embedding_table_norm=True,
    qk_norm="scaleless",
    score_scale="qk_scale_factor",
    post_norm_eps="post_norm_eps",
    final_norm_offset=0.0,
    layer=replace(GEMMA2.layer, output_gate="self_attn.gate_proj"),
    config_keys=config_keys(activation="hidden_activation", logit_scale="output_multiplier"),
    placeholder_keys=KIMI_K25_TEXT.placeholder_keys,
    placeholder_row=KIMI_K25_TEXT.placeholder_row,
)

# Step3p7's decoder (step3p5, Step3p7ForConditionalGeneration; its text type has no causal-LM class): Laguna's layers
# (per-head q/k RMSNorms before partial RoPE with a theta and a rotated share per layer type, windows on the
# "sliding_attention" layers, one output gate per head) with these changes read from its modeling code: every RMSNorm
# Gemma's (1 + w: input, post-attention, final, q/k), the gate a sigmoid (Laguna's softplus), the sliding layers' own
# query heads (num_sliding_attention_heads, a per_layer_config override the layer's config view holds:
# model/config_reads.view_heads), the scores at query_pre_attn_scalar ** -0.5; and Ling 3's SwiGLU clipped after the
# activation at a limit per layer (swiglu_limits for the routed experts, swiglu_limits_shared for the shared expert
# and, unlike Ling 3, the dense MLPs: MoeSpec.dense_limited), the routed sum times moe_router_scaling_factor, the
# shared expert share_expert_dim wide. Transformers' own names, or the release's (moe.gate_proj / up_proj / down_proj
# stacked, moe.gate, moe.router_bias, share_expert) read through tensor_aliases and row_views
STEP3P5 = replace(
    LAGUNA,
    name="step3p5",
    norm_offset=1.0,
    output_gate_activation="sigmoid",
    moe=replace(LAGUNA.moe, activation="swiglu_limited", dense_limited=True),  # type: ignore[arg-type]
    tensor_aliases=(  # the release's names (transformers' step3p7 conversion mapping)
        ("mlp.gate.weight", "moe.gate.weight"),
        ("mlp.gate.e_score_correction_bias", "moe.router_bias"),
        ("mlp.experts.down_proj", "moe.down_proj.weight"),
        ("mlp.shared_experts.", "share_expert."),
    ),
    row_views=(joined(r"\.moe\.gate_proj\.weight$", ".mlp.experts.gate_up_proj", ".moe.up_proj.weight"),),
    config_keys=config_keys(
        routed_scaling="moe_router_scaling_factor",
        shared_expert_intermediate_size="share_expert_dim",
    ),
)

# Muse-Spark's decoder (muse_spark_text, MuseSparkForConditionalGeneration): Muse-Glimmer's with a weightless
# RMSNorm on each head's attention output before the gate (o_norm), a weightless post-attention norm and a
# post-feedforward one that scales by (1 + w) before it normalizes (both at post_norm_eps), each residual add
# through a learned gate (sigmoid(w / T) x block + sqrt(max(sigmoid(-w / T) (1 + sigmoid(w / T)), 1e-3)) x residual,
# T residual_gate_temperature), a SwiGLU of hidden_act on the "dense" layers of mlp_layer_types, and on the others
# MuseSparkMoE: an fp32 router, its logits times output_multiplier, the top k of sigmoid + the selection bias
# weighted by the unbiased sigmoid over their sum (+1e-15, below fp32's resolution of any sum of k sigmoids the
# router reaches) times routed_scaling_factor; the input pooled to moe_hidden_size (pre_expert_proj) and normed
# (1 + w), each fused SwiGLU expert's output through one shared input-scaled norm, the weighted sum unpooled
# (post_expert_proj; graph/pooled_experts.py). Its class embeds the image, video and audio placeholders as id 0
MUSE_SPARK_TEXT = replace(
    MUSE_GLIMMER_TEXT,
    name="muse_spark_text",
    head_output_norm=True,
    post_norm_kinds=("rms_free", "input_scaled"),
    residual_gate_floor=1e-3,  # MuseSparkResidualGate's residual_gate_eps
    layer=replace(
        MUSE_GLIMMER_TEXT.layer, residual_gates=("post_attention_residual_gate", "post_feedforward_residual_gate")
    ),
    moe=MoeSpec(
        MoeNames(
            per_expert=(),
            shared_expert=None,
            expert_bias="gate.e_score_correction_bias",
            latent=("pre_expert_proj", "post_expert_proj"),
            latent_norm="pre_expert_norm",
            expert_norm="experts.post_expert_norm",
        ),
        routing="sigmoid_topk",
        normalize=True,
        router_dtype="float32",
        expert_norm_form="shared_input_scaled",
    ),
    config_keys=config_keys(logit_scale="output_multiplier", router_logit_scale="output_multiplier"),
    placeholder_keys=("image_token_id", "video_token_id", "audio_token_id"),
)

WRAPPED_FAMILIES: tuple[ArchSpec, ...] = (
    COSMOS3_OMNI_TEXT, HY_V4_VL_TEXT, COSMOS3_EDGE_TEXT, PADDLEOCR_VL_TEXT, EMU3_TEXT, DEEPSEEK_OCR2_TEXT,
    KIMI_K25_TEXT, CHAMELEON, MOLMO2_TEXT, PHI4_MULTIMODAL_TEXT, ERNIE4_5_VL_TEXT, MUSE_GLIMMER_TEXT, MUSE_SPARK_TEXT,
    STEP3P5,
)  # fmt: skip
