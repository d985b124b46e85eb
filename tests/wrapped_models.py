"""Tiny random checkpoints of multimodal classes that wrap an exported decoder (gqa_export/arch/wrapped_decoders.py).

Each is the class's own config with a tiny text_config of the named decoder family (every other
sub-config, the vision tower's, shrunk to one narrow layer: the export never reads it, but it is in
the checkpoint like in a real one) and its placeholder ids inside the vocabulary (300 / 301), so a
prompt holding them proves they are embedded as the decoder's own rows. `hub_layout` writes the
names the class's published checkpoints use (`save_original_format`); False: transformers 5.x's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiny_models import randomize_norms, save_tokenizer

# a text decoder of each family, small: sizes every family reads, plus what gives it its character
TEXT: dict[str, Any] = dict(
    vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=512, bos_token_id=0, eos_token_id=1, pad_token_id=5,
)  # fmt: skip
FAMILY_TEXT: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {"use_sliding_window": False},
    "qwen3": {},
    "gemma": {"hidden_activation": "gelu_pytorch_tanh"},
    "emu3_text_model": {},  # Emu3's: Llama's
    # Kosmos-2's: XGLM's layers (its own key spellings; every head its own keys and values) with two sub-LayerNorms;
    # pad id 5 moves its positions' first row to 6 (XGLM's offset is 2), so that a fixed offset shows
    "kosmos_2_text_model": {
        "ffn_dim": 96,
        "num_key_value_heads": 4,
        "num_hidden_layers": 3,
        "activation_function": "gelu",
    },
    # Chameleon's (a flat config, no text_config): its RMSNorms at eps 0.1, so that q/k norms read at it (not at
    # their module's 1e-5) show; swin_norm is a case of its own (tests/arch/test_wrapped_decoders.py)
    "chameleon": {"rms_norm_eps": 0.1},
    # Qwen2.5-Omni's thinker: Qwen2's under Qwen2.5-VL's M-RoPE (sections over 8 frequencies)
    "qwen2_5_omni_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}},
    # Granite's multipliers, each away from 1, under Granite-4-Vision's and Granite-Docling's own text types, and
    # Granite's own (LLaVA-NeXT's decoder in IBM's granite-vision-3.x)
    **{
        text: {
            "embedding_multiplier": 2.0,
            "residual_multiplier": 0.5,
            "attention_multiplier": 0.2,
            "logits_scaling": 4.0,
        }
        for text in ("granite4_vision_text", "granite_docling_text", "granite")
    },
    # Cosmos3-Edge's decoder: Llama's with a relu2 fc1 / fc2 MLP, M-RoPE (interleaved) sections over 8 frequencies
    "cosmos3_edge_text": {
        "hidden_act": "relu2",
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e8,
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
        },
    },
    # Molmo2's decoder, each config choice off its default: OLMo's full-width q/k norms, post-norm layers, YaRN on
    # layer 1 only (layer 0 unscaled), 16 embedding rows past the head's 384 (ids 384-399: the class's markers)
    "molmo2_text": {
        "qk_norm_type": "olmo",
        "norm_after": True,
        "rope_scaling_layers": [1],
        "additional_vocab_size": 16,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
        },
    },
    # Mistral-Large-4's decoder: 4 layers, layer 2 NoPE, layer 3 reading layer 1's latent cache (0-1 dense, 2-3 the
    # top 2 of 8 softmax experts within the best of 2 groups); YaRN over 128 original positions, logits capped at 3
    # (LeRoPE's alpha and the per-head query scales drawn in save_wrapped; index_topk its default 2048, past the 512
    # positions)
    "mistral_large4_text": {
        **dict(num_hidden_layers=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8),
        **dict(v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1),
        **dict(moe_intermediate_size=32, routed_scaling_factor=1.5, index_head_dim=16, index_n_heads=2),
        **dict(final_logit_softcapping=3.0, no_rope_layers=[1, 1, 0, 1], kv_source_layers=[0, 1, 2, 1]),
        "indexer_types": ["full", "shared", "shared", "shared"],  # one indexer (unread): HF's generate runs it
        "first_k_dense_replace": 2,
        "rope_parameters": {
            **dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=128),
            **dict(beta_fast=32.0, beta_slow=1.0, attention_factor=1.0),
        },
    },
    # Qwen3-VL's decoder: M-RoPE sections over head_dim 16's 8 frequencies, interleaved as its class does
    "qwen3_vl_text": {
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
        }
    },
    # three layers, the last global: the windowed layers and the full one both run
    "cohere2": {"num_hidden_layers": 3, "sliding_window": 4, "sliding_window_pattern": 3, "logit_scale": 0.5},
    "exaone4": {"num_hidden_layers": 3, "sliding_window": 4, "sliding_window_pattern": 3},
    "persimmon": {"num_key_value_heads": 4, "partial_rotary_factor": 0.5},  # multi-head: no kv heads of its own
    "aria_text": {"moe_num_experts": 4, "moe_topk": 2, "moe_num_shared_experts": 1},
    "minimax_m3_vl_text": {"rotary_dim": 16},
    # Muse-Glimmer's decoder: a sliding layer (window 4) and a NoPE full one, the q/k scale, logit multiplier and
    # post-block eps each far from their neighbours' (a norm at the wrong eps shows), a softcap the logits reach
    "muse_glimmer_text": {
        "hidden_activation": "silu",
        "sliding_window": 4,
        "qk_scale_factor": 2.5,
        "output_multiplier": 0.6,
        "final_logit_softcapping": 3.0,
        "rms_norm_eps": 1e-5,
        "post_norm_eps": 0.5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "layer_rope_theta": None,  # the default config's 52 entries dropped: the class derives [theta, 0]
    },
    # Step3p7's decoder (step3p5): a full dense layer and a sliding sparse one (window 4) with 6 query heads to the full
    # layer's 4, RoPE on half of the full layer's head at one theta and all of the sliding one's at another, scores
    # at 24 ** -0.5 (not head_dim 16's); 4 experts top 2 x 1.5 beside a 48-wide shared expert; every SwiGLU clipped
    # where it bites (the dense MLP at 0.4, the routed experts at 0.3, the shared one at 0.5)
    "step3p5": {
        "layer_types": ["full_attention", "sliding_attention"],
        "mlp_layer_types": ["dense", "sparse"],
        "sliding_window": 4,
        "num_sliding_attention_heads": 6,
        "per_layer_config": {1: {"num_attention_heads": 6}},
        "query_pre_attn_scalar": 24,
        "rope_parameters": None,
        "rope_theta": [10000.0, 500.0],
        "partial_rotary_factors": [0.5, 1.0],
        "n_routed_experts": 4,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "share_expert_dim": 48,
        "moe_router_scaling_factor": 1.5,
        "swiglu_limits": [0.0, 0.3],
        "swiglu_limits_shared": [0.4, 0.5],
    },
    # Muse-Spark's decoder: Muse-Glimmer's sizes, a dense layer then a sparse one (the top 2 of 4 experts pooled to
    # 32, 16 inside), the routed scale and gate temperature off 1 (its gates, router and selection bias drawn in
    # save_wrapped)
    "muse_spark_text": {
        "hidden_act": "silu",
        "sliding_window": 4,
        "qk_scale_factor": 2.5,
        "output_multiplier": 0.6,
        "final_logit_softcapping": 3.0,
        "rms_norm_eps": 1e-5,
        "post_norm_eps": 1e-4,  # below the blocks' mean squares: the post-feedforward norm's order shows
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "layer_rope_theta": None,
        "mlp_layer_types": ["dense", "sparse"],
        **dict(num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, moe_hidden_size=32),
        **dict(routed_scaling_factor=1.5, residual_gate_temperature=0.3),
    },
    # Phi-4-multimodal's decoder (its config is the class's, no text_config): Phi-4-mini's partial rotary 0.75 (12
    # of 16 dims) under longrope, 32 original positions (the prompt and decode steps run on the short factors)
    "phi4_multimodal": {
        "original_max_position_embeddings": 32,
        "rope_parameters": {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.75,
            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
            "long_factor": [1.0, 1.5, 2.2, 3.0, 4.1, 5.5],
        },
    },  # the class rotates every channel whatever it says (docs/moe.md)
    # Qwen4-Exp: a DeltaNet layer and an indexed one (QSA cap 63), 3 hyper-connection copies, 4 experts top 2, no PLE
    "qwen4_exp_text": {
        "full_attention_interval": 2,
        "head_dim": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "hc_count": 3,
        "hc_lowrank": 10,
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 60,
        "indexer_compress_ratio": 4,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e6,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
        },
    },
    # GLM-5-Next: a KDA layer with a dense MLP, then a NoPE latent-attention layer (indexer cap 64, pools of 4) with
    # 4 experts top 2 and a shared one, on 3 Sinkhorn hyper-connection copies; swiglu_limit 0.5, the KDA's bound -30
    # and rms_norm_eps 0.01 (not 10, -5 and 1e-5), so that every clip, the bound and the latent norms' eps (1e-6 in
    # DeepSeek-V3's) move the logits
    "glm5_next_text": {
        "num_key_value_heads": 4,
        "layer_types": ["linear_attention", "indexed_attention"],
        "indexer_types": ["full", "full"],
        "mlp_layer_types": ["dense", "sparse"],
        "q_lora_rank": 32,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "linear_num_heads": 2,
        "linear_head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "index_topk": 64,
        "index_kpool": 4,
        "index_head_dim": 16,
        "index_n_heads": 2,
        "hc_mult": 3,
        "hc_sinkhorn_iters": 4,
        "swiglu_limit": 0.5,
        "linear_lower_bound": -30.0,
        "rms_norm_eps": 0.01,
    },
}
# a class's own text type that is an exported family's decoder under another name: that family's
# registry config (model_type the class's), plus what the class's config adds
_GLM4V_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}
_INKLING2_LOOP_CUT = dict(
    num_hidden_layers=4, layer_types=["hybrid_sliding", "hybrid"] * 2, n_layers_per_attn_res_block=1,
    loop_layer_index_start=1, loop_layer_index_end=3, loop_num_passes=2,
)  # fmt: skip
REGISTRY_TEXT: dict[str, tuple[str, dict[str, Any]]] = {
    # GLM-4V's decoders (GLM-4.1V / 4.6V, GLM-OCR): GLM-4's, M-RoPE sections over the rotated half's 4 frequencies
    **dict.fromkeys(("glm4v_text", "glm_ocr_text"), ("glm4", {"rope_parameters": _GLM4V_ROPE})),
    "glm4v_moe_text": ("glm4_moe", {"rope_parameters": _GLM4V_ROPE}),  # GLM-4.5V's: GLM-4-MoE's
    # Qwen3-Omni-MoE's thinker: Qwen3-MoE's, M-RoPE (interleaved) sections over 8 frequencies
    "qwen3_omni_moe_text": (
        "qwen3_moe",
        {
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            }
        },
    ),
    # DeepSeek-OCR-2's: DeepSeek-V2's experts (dense / sparse / sparse) under Llama's attention (heads of 16)
    **{
        text: ("deepseek_v2", {"head_dim": 16, "mlp_layer_types": ["dense", "sparse", "sparse"]})
        for text in ("deepseek_ocr2_text", "unlimited_ocr_text")
    },
    "hunyuan_vl_text": (
        "hunyuan_v1_dense",
        {
            "rope_parameters": {
                "rope_type": "dynamic",
                "rope_theta": 10000.0,
                "alpha": 1000.0,
                "factor": 1.0,
                "mrope_section": [2, 2, 2, 2],
            }
        },
    ),
    # ERNIE-4.5-VL's decoder: ERNIE-4.5-MoE's layers (dense, then experts) with a text and a vision expert set per
    # sparse layer, each top 2 of 6 on its own router and moe_statics row, the sets of different widths; its 3D
    # RoPE's sections over head_dim 16's 8 frequencies (h and w equal, as the class pairs them)
    "ernie4_5_vl_moe_text": (
        "ernie4_5_moe",
        {
            "num_hidden_layers": 3,
            "mlp_layer_types": ["dense", "sparse", "sparse"],
            "moe_intermediate_size": [32, 16],
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [3, 3, 2]},
        },
    ),
    "paddleocr_vl_text": (
        "ernie4_5",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [2, 3, 3]}},
    ),
    # the Inkling decoders' registry layers cut (HF's forward over them, ~0.25 s a call, is most of a check's time):
    # Inkling's to a dense sliding layer and a sparse full one; Inkling2's to a sliding and a full layer in blocks of
    # one; Inkling2-Loop's to four in blocks of one, layers 1 and 2 run twice (6 graph layers, not 16), so that a
    # later pass's messages attend over a block state beside the previous pass's output (the queries matter)
    "inkling_text": (
        "inkling_text",
        {"num_hidden_layers": 2, "local_layer_ids": [0], "mlp_layer_types": ["dense", "sparse"]},
    ),
    "inkling2_text": (
        "inkling2_text",
        {"num_hidden_layers": 2, "layer_types": ["hybrid_sliding", "hybrid"], "n_layers_per_attn_res_block": 1},
    ),
    "inkling2_loop_text": ("inkling2_loop_text", _INKLING2_LOOP_CUT),
    # HY-V4-VL: HY-V4's, every norm at eps 0.1 (its latent norms read it, HY-V4's stay at 1e-6: a difference
    # the logits show), Qwen3-VL's M-RoPE sections over the rope slice's 4 frequencies
    "hy_v4_vl_text": (
        "hy_v4",
        {
            "rms_norm_eps": 0.1,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
        },
    ),
}


def _image_token(code: int) -> str:
    """Chameleon's name of VQ code `code` in its vocabulary (ChameleonImageVocabularyMapping reads it back)."""
    return "IMGIMG" + "".join(chr(ord("A") + int(c)) for c in str(code)) + "Z"


# sub-config sizes a tower or projector reads (whichever keys its config has)
_SHRUNK = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
    depth=1, embed_dim=16, num_heads=2, image_size=28, patch_size=14, projection_dim=16,
)  # fmt: skip
# the SAM ViT-B that DeepSeek-OCR-2's and Unlimited-OCR's vision configs nest, at one narrow layer
_TINY_SAM: dict[str, Any] = dict(
    hidden_size=16, output_channels=16, num_hidden_layers=1, num_attention_heads=2, image_size=64, mlp_dim=32,
    global_attn_indexes=[0], downsample_channels=[16, 16],
)  # fmt: skip
# classes whose top-level ids must fit the tiny vocabulary: Apertus-1.5's image and audio codebooks are
# token ranges of it (image ids from 320, audio ids from 352, to 384; its head keeps the first 320)
# dots3-note's towers feed the decoder's width and its vision tower's layers are MoE ones per layer (one dense)
_DOTS3_TOWER = {"adapter_out_dim": 64}
_AUDIO = {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32, "d_model": 16, "output_dim": 64}
# Granite-4-Vision's default config names no deepstack layers (its class needs them): one, and the spatial
# groups, on the tiny tower's one layer and the decoder's two; Granite-Docling's tower feeds the decoder's width
_CLASS_KEYS: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {
    "granite4_vision": (
        {
            "deepstack_layer_map": [[0, 1]],
            "spatial_target_layers": [0, 1, 0, 1],
            "downsample_rate": "1/2",
            "vision_feature_layer": -1,
            "spatial_vision_layer": -1,
        },
        {"vision_config": {"hidden_size": 64}},  # its Q-Former runs hidden_size // 64 heads
    ),
    "granite_docling": ({}, {"vision_config": {"out_hidden_size": 64}}),
    "llava_onevision1_5": ({}, {"vision_config": {"out_hidden_size": 64}}),  # its RICE tower feeds the decoder's width
    # Muse-Spark's audio tower feeds the decoder's width (the config checks it), one narrow stage; its audio
    # placeholder inside the vocabulary
    "muse_spark": (
        {"audio_token_id": 302},
        {"audio_config": dict(patch_sizes=[4], hidden_sizes=[16], depths=[1], num_hidden_layers=1, out_hidden_size=64)},
    ),
    # GLM-5-Next's patch merger: 1536 -> 10240 by default (47M parameters), narrow
    "glm5_next": ({}, {"vision_config": {"out_hidden_size": 64, "projection_intermediate_size": 32}}),
    # Molmo2's adapter reads the tiny ViT's one layer and feeds the decoder's width; its image and frame
    # markers are rows of the additional vocabulary (past the head's 384), as the release's are
    "molmo2": (
        {
            "image_start_token_id": 384,
            "image_end_token_id": 385,
            "low_res_image_start_token_id": 388,
            "frame_start_token_id": 391,
            "frame_end_token_id": 392,
        },
        {
            "vision_config": {"head_dim": 8, "image_size": [28, 28], "num_position_embeddings": 4},
            "adapter_config": {"vision_feature_layer": [-1], "head_dim": 8, "text_hidden_size": 64},
        },
    ),
    # DeepSeek-OCR-2's encoders nest in its vision config (a SAM ViT-B and a 7B Qwen2 by default): both tiny
    "deepseek_ocr2": (
        {},
        {
            "vision_config": {
                "sam_config": dict(_TINY_SAM),
                "encoder_config": {
                    "vocab_size": 16,
                    "hidden_size": 16,
                    "intermediate_size": 32,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 2,
                    "max_window_layers": 1,
                },
            }
        },
    ),
    # Unlimited-OCR's: a GOT-OCR2 SAM and a CLIP ViT-L by default, both tiny
    "unlimited_ocr": (
        {},
        {
            "vision_config": {
                "sam_config": dict(_TINY_SAM),
                "encoder_config": {
                    "hidden_size": 16,
                    "intermediate_size": 32,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "image_size": 28,
                    "patch_size": 14,
                },
            }
        },
    ),
    # Emu3's image vocabulary: its placeholder and end-of-line ids (no visual tokens in the tiny vocabulary);
    # its VQ-VAE and the Omni thinkers' audio towers at their smallest (their defaults take seconds to build)
    "emu3": (
        {"vocabulary_map": {"<image>": 300, "<|extra_200|>": 301}},
        {"vq_config": {"codebook_size": 32, "base_channels": 32, "channel_multiplier": [1], "num_res_blocks": 1}},
    ),
    # Chameleon's image vocabulary: the <image> placeholder, then 48 image tokens ("IMGIMG" + the code's digits
    # as letters A-J + "Z") whose logits its class masks; its VQ-VAE at one narrow level
    "chameleon": (
        {"vocabulary_map": {"<image>": 300, **{_image_token(i): 320 + i for i in range(48)}}},
        {
            "vq_config": {
                "num_embeddings": 48,
                "base_channels": 32,
                "latent_channels": 16,
                "channel_multiplier": [1],
                "num_res_blocks": 1,
                "resolution": 32,
            }
        },
    ),
    **{
        thinker: ({}, {"audio_config": _AUDIO, "vision_config": {"depth": 1, "out_hidden_size": 64}})
        for thinker in ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker")
    },
    "dots3_note": (
        {},
        {
            "vision_config": {
                **_DOTS3_TOWER,
                "adapter_in_dim": 16,
                "mlp_layer_types": ["dense"],
                "per_layer_config": {},
            },
            "audio_config": {**_DOTS3_TOWER, "adapter_input_size": 16},
        },
    ),
    # Inkling2's and Inkling2-Loop's tower projects to the decoder's width (the config checks it), through a narrow MLP
    **{
        inkling: ({}, {"vision_config": {"text_hidden_size": 64, "projection_hidden_dim": 16, "posemb_grid_size": 2}})
        for inkling in ("inkling2", "inkling2_loop")
    },
    # Inkling's vision HMLP: its config's `n_layers` (not num_hidden_layers, so not shrunk above) folds a 40-pixel,
    # 2-frame patch in 24 layers whose temporal widths are 64 times what they mean to be (plan_out_scales: 614400
    # channels): the build runs out of memory. Three layers over 2-pixel, 2-frame patches (no scipy needed: n_layers
    # >= its 3 scales); its audio codebooks 4 x 8; its audio placeholder inside the vocabulary
    "inkling_mm_model": (
        {"audio_token_id": 301},
        {
            "vision_config": {"n_layers": 3, "patch_size": 2, "temporal_patch_size": 2},
            "audio_config": {"n_mel_bins": 4, "mel_vocab_size": 8},
        },
    ),
    # Phi-4-multimodal: its placeholders live in the sub-configs (image 300, audio 301); the conformer and its
    # convolutions at 16 channels, one block
    "phi4_multimodal": (
        {},
        {
            "vision_config": {"image_token_id": 300},
            "audio_config": {
                "audio_token_id": 301,
                "num_blocks": 1,
                "ext_pw_out_channel": 16,
                "depthwise_separable_out_channel": 16,
                "nemo_conv_channels": 16,
            },
        },
    ),
    "apertus1p5": (
        {"image_token_offset": 320, "audio_token_offset": 352},
        # its image and audio tokenizers (a VQ conv net, WavTokenizer's 12-layer decoder) at one narrow level each
        {
            "vision_config": {
                "codebook_size": 32,
                "base_channels": 32,
                "latent_channels": 32,
                "embed_dim": 32,
                "num_res_blocks": 1,
                "channel_multiplier": [1, 2],
                "attn_resolutions": [],
                "resolution": 32,
            },
            "audio_config": {
                "codebook_size": 32,
                "num_filters": 4,
                "num_lstm_layers": 1,
                "decoder_hidden_size": 16,
                "decoder_intermediate_size": 32,
                "decoder_num_layers": 1,
                "decoder_attention_num_groups": 4,
            },
        },
    ),
}
INKLING_TEXT = ("inkling_text", "inkling2_text", "inkling2_loop_text")
_PLACEHOLDERS = {"image_token_id": 300, "image_token_index": 300, "video_token_id": 301, "video_token_index": 301}
_DROPPED = ("layer_types", "mlp_layer_types", "architectures", "transformers_version", "_name_or_path")


def _shrunk(sub: dict[str, Any]) -> dict[str, Any]:
    """A tower's config at the smallest sizes; a per-layer pattern dropped (its class fills one for one
    layer), an audio codebook as wide as the shrunk hidden size (WavTokenizer checks it)."""
    small = {k: (_SHRUNK[k] if k in _SHRUNK and isinstance(v, int) and not isinstance(v, bool) else v)
             for k, v in sub.items() if k != "layer_types"}  # fmt: skip
    if "codebook_dim" in small:
        small["codebook_dim"] = _SHRUNK["hidden_size"]
    return small


def _registry_config(text_type: str) -> dict[str, Any]:
    """The registry's tiny config of the decoder family (tests/dense_models.py, tests/moe_models.py),
    or of the family a class's own text type borrows it from (REGISTRY_TEXT), with that one's extras."""
    import dense_models
    import moe_models

    family, extra = REGISTRY_TEXT.get(text_type, (text_type, {}))
    try:
        base = dense_models.family_config(family)
    except ValueError:
        base = moe_models.family_config(family)
    return {**base, **extra}


def _config(model_type: str, text_type: str, overrides: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    if text_type in FAMILY_TEXT:
        defaults = {k: v for k, v in AutoConfig.for_model(text_type).to_dict().items() if k not in _DROPPED}
        text = {**defaults, **TEXT, **FAMILY_TEXT[text_type], **overrides}  # a family's own layer patterns kept
    else:  # a family with its own tiny config in the registry (dense / MoE models): that one, exact there
        text = {**_registry_config(text_type), "model_type": text_type, **overrides}
    subs = {key: _shrunk(value.to_dict()) for key, value in vars(default).items()
            if key.endswith("_config") and key != "text_config" and hasattr(value, "to_dict")}  # fmt: skip
    ids = {k: v for k, v in _PLACEHOLDERS.items() if getattr(default, k, None) is not None}
    top, sub_keys = _CLASS_KEYS.get(model_type, ({}, {}))
    for key, values in sub_keys.items():
        subs[key].update(values)
    if "text_config" in vars(default):
        config = AutoConfig.for_model(model_type, text_config=text, **subs, **ids, **top)
    else:  # a class whose config is its decoder's, flat (Chameleon, Phi-4-multimodal: placeholders in sub-configs)
        flat = {**text, **subs, **ids, **top}
        config = AutoConfig.for_model(model_type, **{k: v for k, v in flat.items() if k != "model_type"})
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, TEXT[key])
    return config


def save_wrapped(
    out_dir: Path, model_type: str, text_type: str, hub_layout: bool = True, **text_overrides: Any
) -> Path:
    """Save a tiny random `model_type` multimodal checkpoint whose decoder is a `text_type` one, plus
    the tiny tokenizer. Matrices drawn at 0.06 (initializer_range's 0.02 leaves logits near 0)."""
    import torch
    import transformers

    config = _config(model_type, text_type, text_overrides)
    torch.manual_seed(0)
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    # Phi-4-multimodal's class is a causal LM's in transformers' mappings, not an image-text-to-text one's
    image_text = model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    auto = transformers.AutoModelForImageTextToText if image_text else transformers.AutoModelForCausalLM
    model = auto.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.normal_(0.0, 0.06)
    randomize_norms(model, biases=True)
    if text_type == "mistral_large4_text":  # LeRoPE's alpha (init 0) and the per-head query scales (0 and 1) drawn
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("rotary_emb.alpha", "softmax_scaling.scale", "softmax_scaling.bias")):
                    param.add_(torch.randn_like(param))
    if text_type == "kosmos_2_text_model":  # its layers at 0.3, the tied table at 0.06: else greedy repeats one id
        with torch.no_grad():
            for param in model.text_model.model.layers.parameters():
                if param.ndim >= 2:
                    param.normal_(0.0, 0.3)
    if text_type == "step3p5":  # its selection bias (a zero buffer) drawn, so that it moves the experts chosen
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    buffer.add_(torch.randn_like(buffer) * 0.2)
    if text_type == "muse_spark_text":  # residual gates (init near 0), the router and its selection bias (zeros) drawn
        with torch.no_grad():
            for name, tensor in (*model.named_parameters(), *model.named_buffers()):
                if name.endswith("residual_gate.gate"):  # T 0.3: w / T spread over the sigmoid, 4 channels floored
                    tensor.normal_(0.0, 1.0)[:4] = 4.0
                elif name.endswith("mlp.gate.weight"):
                    tensor.normal_(0.0, 0.3)
                elif name.endswith("e_score_correction_bias"):
                    tensor.normal_(0.0, 0.3)
    if text_type in INKLING_TEXT:  # its block queries (zeros), clip scales, banks and taps drawn as its registry row's
        from derived_moe_models import finish

        finish(model, text_type, torch.Generator().manual_seed(0))
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir, save_original_format=hub_layout)
    # a release's tokenizer spells its additional rows' ids too (Molmo2's image and frame markers)
    extra = int(getattr(config.get_text_config(), "additional_vocab_size", 0) or 0)
    save_tokenizer(out_dir, vocab_size=TEXT["vocab_size"] + extra)
    return out_dir
