"""Families whose layers are another family's with one or two mechanisms changed (issue #39 item 3),
each read from its modeling code in transformers 5.24 and written as a `replace()` of the closest
spec: what differs is named by what it does, never by the family.

EXAONE-3.x and InternLM3 run transformers' LlamaForCausalLM under their own model_type; EXAONE's
checkpoints keep their GPT-2-style tensor names (transformers renames them at load, and back at save).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gqa_export.arch.biased_routing_families import GLM4_MOE
from gqa_export.arch.classic_families import GPT2, GPT_NEOX, OPT
from gqa_export.arch.families import APERTUS, ARCEE, COHERE2, ERNIE4_5, GEMMA2, GLM4, GRANITE, LLAMA, MISTRAL
from gqa_export.arch.ngpt_spec import NgptNames
from gqa_export.arch.spec import (
    DECODER_PREFIXES,
    LM_HEAD_NAMES,
    AbsolutePositions,
    LayerNames,
    Refusal,
    config_keys,
)
from gqa_export.arch.stream_spec import RecurrentStackNames

# EXAONE-3.0/3.5: Llama's layers (llama3 RoPE, SwiGLU, RMSNorm) under transformer.wte / h.{i} / ln_f,
# attention in attn.attention.{q,k,v,out}_proj and the MLP as c_fc_0 (gate), c_fc_1 (up), c_proj (down)
EXAONE = replace(
    LLAMA,
    name="exaone",
    embed="wte.weight",
    final_norm="ln_f.weight",
    layer_prefix="h.{i}.",
    layer=LayerNames(
        input_norm="ln_1",
        post_attention_norm="ln_2",
        q="attn.attention.q_proj",
        k="attn.attention.k_proj",
        v="attn.attention.v_proj",
        o="attn.attention.out_proj",
        gate="mlp.c_fc_0",
        up="mlp.c_fc_1",
        down="mlp.c_proj",
    ),
    decoder_prefixes=("transformer.",),
)
# InternLM3: LlamaForCausalLM; its qkv_bias / bias keys are Llama's attention_bias / mlp_bias (found
# in the checkpoint)
INTERNLM3 = replace(LLAMA, name="internlm3")
# IQuest-Coder: LlamaForCausalLM under its own model_type (its config refuses clip_qkv and sliding windows)
IQUESTCODER = replace(LLAMA, name="iquestcoder")
# Helium: Llama's layers with GPT-J (interleaved) RoPE pairs, ERNIE-4.5's form
HELIUM = replace(ERNIE4_5, name="helium")
# VaultGemma: Gemma-2 (softcaps, query_pre_attn_scalar, (1 + w) norms, sqrt(hidden) embedding scale,
# windows) with the post-attention and post-feedforward norms removed: pre-norm layers whose MLP
# norm is pre_feedforward_layernorm
VAULTGEMMA = replace(
    GEMMA2, name="vaultgemma", norm_layout="pre", layer=LayerNames(post_attention_norm="pre_feedforward_layernorm")
)
# Ministral (8B) and CWM: Mistral's layers with a window per layer from layer_types
MINISTRAL = replace(MISTRAL, name="ministral")
CWM = replace(MISTRAL, name="cwm")
# GLM (glm-4-9b, model_type glm): GLM-4's attention and fused gate_up with pre-norm layers (two norms)
GLM = replace(GLM4, name="glm", norm_layout="pre", layer=LayerNames(gate_up="mlp.gate_up_proj"))
# Solar-Open: GLM-4-MoE's grouped sigmoid routing and shared experts on every layer, Llama's
# attention without q/k norms
# its config class drops GLM-4-MoE's first_k_dense_replace: experts on every layer
SOLAR_OPEN = replace(
    GLM4_MOE,
    name="solar_open",
    qk_norm=None,
    layer=LayerNames(),
    moe=replace(GLM4_MOE.moe, layer_rules=()),  # type: ignore[arg-type]
)

# NanoChat: Arcee's non-gated squared-ReLU MLP (fc1 / fc2) in Llama layers whose every norm is an RMSNorm
# without a weight, the final one also applied to the embeddings, scaleless q/k norms after a RoPE that
# rotates by minus the angle, and Gemma-2's final logit softcap (NanoChatForCausalLM is Gemma-2's class)
NANOCHAT = replace(
    ARCEE,
    name="nanochat",
    norm="rms_free",
    embedding_norm="norm.weight",  # the final norm's module (never read: the norm has no weight)
    qk_norm="scaleless",
    qk_norm_after_rope=True,
    rope_reversed=True,
    layer=LayerNames(up="mlp.fc1", down="mlp.fc2"),
)

# GPT-BigCode (StarCoder, SantaCoder): GPT-2's layout (learned positions, LayerNorms with biases, tanh
# GELU, tied) with nn.Linear weights, c_attn fused [q | k | v] with one kv head when multi_query (the
# grouped layout with one group), per head [q k v] without it
GPT_BIGCODE = replace(
    GPT2, name="gpt_bigcode", linear_layout="out_in", qkv_layout="grouped", kv_heads_rule="multi_query_flags"
)
# Persimmon: GPT-NeoX's per-head fused query_key_value in sequential pre-norm LayerNorm layers, q/k
# LayerNorms over head_dim (qk_layernorm, one [D] weight and bias shared by the heads) before a
# partial rotate-half RoPE, a squared-ReLU MLP, an untied lm_head
PERSIMMON = replace(
    GPT_NEOX,
    name="persimmon",
    embed="embed_tokens.weight",
    final_norm="final_layernorm.weight",
    activations=("relu2",),
    parallel_key=None,
    qk_norm="head",
    layer=LayerNames(
        qkv="self_attn.query_key_value",
        o="self_attn.dense",
        up="mlp.dense_h_to_4h",
        down="mlp.dense_4h_to_h",
        q_norm="self_attn.q_layernorm",
        k_norm="self_attn.k_layernorm",
    ),
    decoder_prefixes=DECODER_PREFIXES,
    lm_head_names=LM_HEAD_NAMES,
)
# BioGPT: OPT's learned positions (offset 2, counted from the attention mask) and pre-norm LayerNorm
# layers (nn.LayerNorm's eps 1e-5 whatever layer_norm_eps says) under biogpt., token embeddings scaled by
# sqrt(hidden) (scale_embedding; false: unscaled), hidden_act, a final layer_norm, output_projection as the lm_head
BIOGPT = replace(
    OPT,
    name="biogpt",
    final_norm="layer_norm.weight",
    layer=LayerNames(
        input_norm="self_attn_layer_norm",
        post_attention_norm="final_layer_norm",
        o="self_attn.out_proj",
        up="fc1",
        down="fc2",
    ),
    activations=("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"),
    embedding_scale="sqrt_hidden",  # scale_embedding false: unscaled (model/multipliers.embedding_multiplier)
    config_keys=config_keys(embedding_sqrt_switch="scale_embedding"),
    decoder_prefixes=("biogpt.",),
    lm_head_names=("output_projection.weight",),
    refusals=(),
)

# GPT-Neo: GPT-2's layout with nn.Linear q/k/v (no bias) and out_proj under attn.attention., unscaled
# scores, and local layers (attention_layers "local") that see the last window_size keys
GPT_NEO = replace(
    GPT2,
    name="gpt_neo",
    linear_layout="out_in",
    unit_attention_scale=True,
    layer=LayerNames(
        input_norm="ln_1",
        post_attention_norm="ln_2",
        q="attn.attention.q_proj",
        k="attn.attention.k_proj",
        v="attn.attention.v_proj",
        o="attn.attention.out_proj",
        up="mlp.c_fc",
        down="mlp.c_proj",
    ),
    config_keys=config_keys(
        activation="activation_function",
        norm_eps="layer_norm_epsilon",
        layer_types="attention_layers",
        sliding_window="window_size",
    ),
    layer_type_names=MappingProxyType({"local": "sliding_attention", "global": "full_attention"}),
    refusals=(),
)

# XGLM: BioGPT's layers and scaled embeddings under model. with fairseq's sinusoidal positions (offset
# 2, computed at export: a non-persistent buffer), activation_function, ffn_dim, a tied lm_head
XGLM = replace(
    BIOGPT,
    name="xglm",
    positions=AbsolutePositions("embed_positions.weights", offset=2, sinusoidal=True),
    config_keys=config_keys(
        activation="activation_function", intermediate_size="ffn_dim", embedding_sqrt_switch="scale_embedding"
    ),
    decoder_prefixes=DECODER_PREFIXES,
    lm_head_names=LM_HEAD_NAMES,
    refusals=(),
)

# Kosmos-2's text decoder (kosmos_2_text_model, under Kosmos2ForConditionalGeneration's text_model.): XGLM's layers
# with a LayerNorm over the attention output before out_proj (inner_attn_ln) and one over the activated fc1 before
# fc2 (ffn_layernorm), at the config's layer_norm_eps; positions from pad_token_id + 1 (M2M100's sinusoids), tied
KOSMOS2_TEXT = replace(
    XGLM,
    name="kosmos2_text",
    layer=replace(
        XGLM.layer,
        up="ffn.fc1",
        down="ffn.fc2",
        attention_output_norm="self_attn.inner_attn_ln",
        mlp_inner_norm="ffn.ffn_layernorm",
    ),
    fixed_norm_eps=None,
    positions=AbsolutePositions("embed_positions.weights", sinusoidal=True, offset_after_pad=True),
    decoder_prefixes=("text_model.model.",),
    lm_head_names=("text_model.lm_head.weight",),
    refusals=(
        Refusal(
            "scale_embedding", "Kosmos-2 without scale_embedding (unscaled token embeddings) is not supported", (False,)
        ),
        Refusal(
            "pad_token_id", "Kosmos-2 without a pad_token_id (its positions count from it) is not supported", (None,)
        ),
    ),
)

# BitNet b1.58: Llama's layers with a squared-ReLU gated MLP and two more RMSNorms inside the blocks,
# over the attention output before o_proj and over relu2(gate) * up before down_proj. Its float
# ("-bf16") checkpoint is this spec as stored; the packed ternary one (quantization_config
# quant_method "bitnet") is read by source/bitnet.py into 2-bit MatMulNBits (docs/prequantized.md §3.10)
BITNET = replace(
    LLAMA,
    name="bitnet",
    activations=("relu2",),
    layer=LayerNames(attention_output_norm="self_attn.attn_sub_norm", mlp_inner_norm="mlp.ffn_sub_norm"),
)

# Apertus-1.5's text decoder (apertus1p5_text, transformers 5.25): ApertusForCausalLM whose lm_head may keep
# only the vocabulary's first output_vocab_size ids (the visual and audio code ids are input-only): the
# logits are that wide (ModelDims.logits_width, genai_config's vocab_size), the embedding table whole. Its
# multimodal checkpoint's model.language_model. root is one of the decoder prefixes
APERTUS1P5_TEXT = replace(APERTUS, name="apertus1p5_text")

# Cohere-Compass's text decoder (cohere_compass_text, transformers 5.25; North-Micro-Vision's LM): Cohere2's
# parallel layers (one bias-free LayerNorm, sliding layers windowed, logit_scale, tied) whose attention applies
# Qwen3's rotate-half RoPE wherever its layer type's rope_parameters are set (a null entry: NoPE), with that
# type's own theta. The rotary embedding is M-RoPE (Qwen3-VL's interleaved sections): a text-only prompt's
# three axes carry the same positions, so it is plain RoPE; the deepstack visual adds come with images only
COHERE_COMPASS_TEXT = replace(COHERE2, name="cohere_compass_text", rope_interleaved=False, rope_layers="typed")

# Cohere2-Vision's decoder (Cohere2VisionForConditionalGeneration, Command-A Vision): Cohere2, but the class
# applies its lm_head alone, never the text config's logit_scale (which Cohere2ForCausalLM and Aya-Vision apply)
COHERE2_VISION_TEXT = replace(COHERE2, name="cohere2_vision_text", ignore=("logit_scale",))

# GraniteSWA: Granite's layers and multipliers with a learned per-head sink logit on every attention layer
# (its sigmoid(logsumexp(scores) - sink) output scale is the softmax with exp(sink) added to the
# denominator, GroupQueryAttention's head_sink), sliding layers from layer_types, and each layer's own
# RoPE base from layer_rope_theta (0: that layer without RoPE; model/layer_ropes.py)
GRANITE_SWA = replace(GRANITE, name="granite_swa", attention_sinks="self_attn.sinks")

# HyperCLOVAX: Granite's layers and multipliers with peri-layer norms: each block's output RMSNormed
# (post_norm1, post_norm2) before the residual multiplier and the add, where use_post_norm says so (off:
# Granite's pre-norm layers), and the logits multiplied by logits_scaling (Granite divides by it)
HYPERCLOVAX = replace(
    GRANITE,
    name="hyperclovax",
    norm_layout="sandwich",
    post_norms_switch=True,
    layer=LayerNames(
        post_attention_norm="post_norm1",
        pre_feedforward_norm="post_attention_layernorm",
        post_feedforward_norm="post_norm2",
    ),
    config_keys=config_keys(logit_scale="logits_scaling"),
    ignore=("logits_scaling",),
)

# DiffLlama: Llama's layers (Mistral's MLP, Gemma's causal-LM class without softcaps) with differential
# attention: two softmaxes over shared q and k, one per half of the value heads, the second's output
# times a learned per-layer lambda subtracted per query-head pair, a weightless RMSNorm over both halves,
# times (1 - lambda_init) (graph/differential.py); scores scaled by the projection head_dim ** -0.5
DIFFLLAMA = replace(LLAMA, name="diffllama", differential_attention="self_attn", half_head_dim_scale=True)

# Doge: Llama's layers with per-head q/k RMSNorms before RoPE, dynamic mask attention (each key's scores plus
# exp(A softplus(dt_proj(its value))) per kv head, carried in the cached value: graph/dynamic_mask.py) and
# the residual times a learned vector before each add; its cross-domain MoE (is_moe) is refused
DOGE = replace(
    LLAMA,
    name="doge",
    qk_norm="head",
    dynamic_key_bias="self_attn",
    layer=LayerNames(
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        residual_scales=("input_residual", "post_attention_residual"),
    ),
    refusals=(
        Refusal(
            "is_moe",
            "Doge's cross-domain MoE (is_moe) reshapes its router logits across the batch and the sequence "
            "(view(2, batch * length, -1)), so a prompt token's experts depend on the other tokens and on "
            "padding, which no causal decoder graph reproduces",
        ),
    ),
)

# HRM-Text: an L and an H stack of Llama-shaped layers (MHA, a per-channel sigmoid gate from gate_proj on
# the heads' output, weightless RMSNorms, each stack ending in one) run H_cycles x (L_cycles + 1) times over
# two streams, unrolled with one KV cache per invocation (graph/recurrent_stacks.py); embeddings times
# embedding_scale; the H stream's final norm feeds the lm_head (no other final norm)
HRM_TEXT = replace(
    LLAMA,
    name="hrm_text",
    norm="rms_free",
    final_norm=None,
    embedding_scale="config",
    config_keys=config_keys(embedding_multiplier="embedding_scale"),
    # named as transformers' own layout (save_original_format=False); the hub layout (what save_pretrained
    # writes by default) fuses attn.gqkv_proj [gate | q | k | v] and mlp.gate_up_proj [gate | up], read as their
    # parts, and names attn.o_proj: either checkpoint gives the same package
    layer=LayerNames(output_gate="self_attn.gate_proj"),
    split_projections=(
        ("attn.gqkv_proj", ("self_attn.gate_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
        ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")),
    ),
    tensor_aliases=(("self_attn.o_proj", "attn.o_proj"),),
    recurrent_stacks=RecurrentStackNames(),
)

# Dory (NVIDIA Nemotron-Labs Dory, transformers 5.25): n_input_layers layers once, the next n_recurrent_layers
# n_recurrent_loops times with shared weights (the stream reset to l2(h) + l2(h_in) before each pass; "per_loop":
# each pass its own KV caches in HF's order, "last_loop": the earlier passes read the last pass's cache without
# writing it), n_output_layers once, unrolled (graph/recurrent_loop.py); nGPT layers
# (graph/ngpt.py, graph/ngpt_scales.py): weightless L2 norms everywhere (eps 1e-6, hard-coded), Gemma-2's
# sandwich whose adds interpolate from the normed input, AFMoE's attention with L2-normed q/k per head before
# RoPE, the query times (sqk c) ** 2 after it, the per-channel gate sigmoid(gate_proj(x) (s_gate c) ** 2), an
# L2 norm before o_proj; gate / up times suv sqrt(hidden), an L2 norm before down_proj; logits times
# logit_scale / initializer_range; each layer type its own RoPE theta (rope_parameters per type)
DORY = replace(
    LLAMA,
    name="dory",
    norm="l2",
    fixed_norm_eps=1e-6,
    norm_layout="sandwich",
    qk_norm="head",
    rope_layers="typed",
    layer=LayerNames(
        pre_feedforward_norm="pre_feedforward_layernorm",
        post_feedforward_norm="post_feedforward_layernorm",
        q_norm="self_attn.q_norm",
        k_norm="self_attn.k_norm",
        output_gate="self_attn.gate_proj",
        attention_output_norm="self_attn.attn_sub_norm",
        mlp_inner_norm="mlp.ffn_sub_norm",
    ),
    recurrent_loop=True,
    ngpt=NgptNames(),
    # the hub's names (transformers' conversion mapping): backbone., embeddings, g_proj, and the released
    # checkpoints' attention / MLP blocks as layers 2i / 2i + 1 (source/stored_renames.py)
    stored_renames=(
        (r"\.self_attn\.g_proj\.", ".self_attn.gate_proj.", False),
        (r"^backbone\.", "model.", False),
        (r"\.embeddings\.", ".embed_tokens.", False),
    ),
    collapsed_layer_pairs=True,
)

DERIVED = (
    EXAONE, INTERNLM3, HELIUM, VAULTGEMMA, MINISTRAL, CWM, GLM, SOLAR_OPEN, NANOCHAT, GPT_BIGCODE, PERSIMMON, BIOGPT,
    GPT_NEO, XGLM, KOSMOS2_TEXT, IQUESTCODER, BITNET, APERTUS1P5_TEXT, COHERE_COMPASS_TEXT, COHERE2_VISION_TEXT,
    GRANITE_SWA, HYPERCLOVAX, DIFFLLAMA, DOGE, HRM_TEXT, DORY,
)  # fmt: skip
