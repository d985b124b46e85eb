"""The tiny checkpoints the tests build, by name: each exercises one feature of a family.

Kept out of conftest.py so that tests import them as a plain module (a second conftest.py, such
as tests/faults/conftest.py, would otherwise shadow `conftest` for `from conftest import ...`).
"""

from __future__ import annotations

from typing import Any

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
    "rope_theta": 500000.0,
}
# name -> save_llama keyword arguments. Each exercises one feature of the Llama spec.
LLAMA_VARIANTS: dict[str, dict[str, Any]] = {
    "gqa": {},
    "mha": {"num_key_value_heads": 4},
    "mqa_tied": {"num_key_value_heads": 1, "tie_word_embeddings": True},
    "llama3_rope": {"rope_parameters": LLAMA3_ROPE},
    "linear_rope_bias": {
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        "attention_bias": True,
        "mlp_bias": True,
    },
    "head_dim_32": {"head_dim": 32, "num_hidden_layers": 3},
    "bf16_sharded": {"dtype": "bfloat16", "max_shard_size": "60KB"},
}
# With tied embeddings a tiny random Gemma-2/3 echoes its last token forever, which would make
# the generation tests weak; those variants are untied (Gemma and Qwen3 cover tying).
WINDOW = 8  # tiny sliding windows, so prompts and generations run far past them
# name -> (model_type, overrides): one tiny checkpoint per family, each with its features on.
FAMILY_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "mistral_window": ("mistral", {"sliding_window": WINDOW}),
    "qwen2_bias_window": (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1, "num_hidden_layers": 3},
    ),
    "qwen3_qk_norm": ("qwen3", {"head_dim": 32, "tie_word_embeddings": True}),
    "phi3_partial_rotary": ("phi3", {"hidden_size": 128, "partial_rotary_factor": 0.5, "sliding_window": WINDOW}),
    "phi3_longrope": (
        "phi3",
        {
            "original_max_position_embeddings": 32,
            "rope_scaling": {
                "type": "longrope",
                "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                "long_factor": [1.0, 1.5, 2.2, 3.0, 4.1, 5.5, 7.0, 9.0],
            },
        },
    ),
    "gemma_head_dim_32": ("gemma", {"head_dim": 32, "initializer_range": 0.5}),  # tied: 0.5 keeps it from echoing
    "gemma2_softcap_window": (
        "gemma2",
        {
            "sliding_window": WINDOW,
            "query_pre_attn_scalar": 24,
            "attn_logit_softcapping": 20.0,
            "final_logit_softcapping": 15.0,
            "num_hidden_layers": 3,
            "tie_word_embeddings": False,
        },
    ),
    "gemma3_local_global": (
        "gemma3_text",
        {
            "sliding_window": WINDOW,
            "sliding_window_pattern": 2,
            "num_hidden_layers": 3,
            "tie_word_embeddings": False,
            "attn_logit_softcapping": 5.0,  # the class never applies it (a Gemma-2 score cap would move the logits)
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        },
    ),
    "smollm3_nope": ("smollm3", {"no_rope_layers": [1, 1, 0], "num_hidden_layers": 3}),
    "granite_multipliers": (
        "granite",
        {"embedding_multiplier": 4.0, "attention_multiplier": 0.1, "residual_multiplier": 0.5, "logits_scaling": 2.0},
    ),
    "olmo2_post_norm": ("olmo2", {"initializer_range": 1.0}),
    "llama_yarn": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 10000.0,
            }
        },
    ),
}
# name -> (arch, text_config overrides): the text decoders of multimodal checkpoints, saved in the
# published hub layout (`language_model.model.*`, flat Qwen2.5-VL) or, with "_v5", transformers
# 5.x's in-memory names (`model.language_model.*`).
MULTIMODAL_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma3_vision": ("gemma3", {}),
    # the class applies neither cap
    "gemma3_vision_v5_softcap": ("gemma3", {"final_logit_softcapping": 5.0, "attn_logit_softcapping": 5.0}),
    "ministral3_vision": ("ministral3", {}),
    "mistral3_vision_v5": ("mistral", {}),
    "qwen2_5_vl": ("qwen2_5_vl", {}),
    "qwen2_5_vl_flat": ("qwen2_5_vl", {"flat_config": True}),  # as the released configs are written
    "qwen3_vl_v5": ("qwen3_vl", {}),
    "qwen3_vl_moe": ("qwen3_vl_moe", {}),  # experts transposed, as the hub stores them
    "qwen2_vl_flat": ("qwen2_vl", {"flat_config": True}),  # as the released configs are written
}
# name -> (form, text overrides): Gemma-4 checkpoints (gemma4_models.py turns every feature on by default)
GEMMA4_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma4_causal": ("causal", {}),
    "gemma4_conditional": ("conditional", {}),
    "gemma4_unified": ("unified", {}),
    # the text class alone (Gemma4UnifiedForCausalLM): plain causal / sliding masks (the class never
    # builds vision runs, though its config says use_bidirectional_attention "vision"); another mix:
    # 7 layers (S S F S S F F), 3 KV-shared, no k = v, window 5, untied lm_head
    "gemma4_unified_text": (
        "unified_causal",
        {
            "num_hidden_layers": 7,
            "num_kv_shared_layers": 3,
            "attention_k_eq_v": False,
            "sliding_window": 5,
            "tie_word_embeddings": False,
        },
    ),
    # another mix: 6 layers (S S F S S F), 2 KV-shared, no k = v (global layers keep 2 kv heads),
    # global head_dim 64 (heads x head_dim > hidden), half-rotary proportional RoPE, window 6,
    # untied lm_head, no softcap, single-wide MLPs, PLE width 16, a bf16 checkpoint in shards
    "gemma4_mix_bf16": (
        "causal",
        {
            "num_hidden_layers": 6,
            "num_kv_shared_layers": 2,
            "attention_k_eq_v": False,
            "global_head_dim": 64,
            "sliding_window": 6,
            "tie_word_embeddings": False,
            "final_logit_softcapping": None,
            "use_double_wide_mlp": False,
            "hidden_size_per_layer_input": 16,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1e6},
            },
            "dtype": "bfloat16",
            "max_shard_size": "100KB",
        },
    ),
}
ALL_VARIANTS = [*LLAMA_VARIANTS, *FAMILY_VARIANTS]
