"""Which HF config attribute each model option is read from ("a|b": the first spelling present).

A family's spec renames the ones it spells differently (Gemma's `hidden_activation`); options a
class never applies though its config may set them are listed in the spec's `ignore`.
"""

from __future__ import annotations

DEFAULT_CONFIG_KEYS: dict[str, str] = {
    "activation": "hidden_act",
    "output_vocab_size": "output_vocab_size",  # an lm_head pruned to the first ids (Apertus-1.5)
    "intermediate_size": "intermediate_size",
    "sliding_window": "sliding_window",
    "layer_types": "layer_types",
    "attn_softcap": "attn_logit_softcapping",
    "final_softcap": "final_logit_softcapping",
    "query_pre_attn_scalar": "query_pre_attn_scalar",
    "attention_multiplier": "attention_multiplier",
    "embedding_multiplier": "embedding_multiplier",
    "embedding_sqrt_switch": "mup_enabled",  # embedding_scale "sqrt_hidden_if_configured" (AFMoE)
    "residual_multiplier": "residual_multiplier",
    "depth_scale": "scale_depth",  # MiniCPM3: residual_scale "depth" (scale_depth / sqrt(layers))
    "logits_scaling": "logits_scaling",
    "no_rope_layers": "no_rope_layers",
    "post_norms": "use_post_norm",  # ArchSpec.post_norms_switch: the sandwich's post-block norms exist
    "layer_rope_theta": "layer_rope_theta",  # one RoPE base per layer, 0 = NoPE (GraniteSWA)
    # the layers whose RoPE applies rope_parameters' scaling, the others unscaled at its theta (Molmo2)
    "scaled_rope_layers": "rope_scaling_layers",
    # embedding rows past vocab_size, input-only ids the lm_head has no row for (Molmo2's additional vocabulary)
    "extra_vocab_rows": "additional_vocab_size",
    # Llama-4: chunked local attention of the "chunked_attention" layers, the scaleless q/k norm's
    # switch, NoPE layers' attention temperature tuning
    "attention_chunk": "attention_chunk_size",
    "qk_norm_flag": "use_qk_norm",
    "temperature_tuning": "attn_temperature_tuning",
    "temperature_floor": "floor_scale",
    "temperature_scale": "attn_scale",
    # Gemma-4: KV-shared layers, k = v on full layers, double-wide MLPs of shared layers, per-layer
    # embeddings, and the global-layer shapes of configs without per-layer views.
    "num_kv_shared_layers": "num_kv_shared_layers",
    # Mistral-Large-4: the layer whose latent KV cache each layer attends over (itself: its own)
    "kv_source_layers": "kv_source_layers",
    "attention_k_eq_v": "attention_k_eq_v",
    "double_wide_mlp": "use_double_wide_mlp",
    "per_layer_input_size": "hidden_size_per_layer_input",
    "global_head_dim": "global_head_dim",
    "global_kv_heads": "num_global_key_value_heads",
    # Mixtures of experts ("a|b": the first spelling the config has)
    "num_experts": "num_experts|num_local_experts",
    "experts_per_token": "num_experts_per_tok|top_k_experts",
    "expert_intermediate_size": "moe_intermediate_size",
    "norm_topk_prob": "norm_topk_prob",
    "decoder_sparse_step": "decoder_sparse_step",
    "expert_layer_period": "expert_layer_period",  # Jamba: experts where i % period == offset
    "expert_layer_offset": "expert_layer_offset",
    "mlp_only_layers": "mlp_only_layers",
    "sparse_layers": "moe_layers",  # an explicit list of the sparse layers (Llama-4)
    "mlp_layer_types": "mlp_layer_types",  # "dense" / "sparse" per layer (GLM-4-MoE-Lite)
    "shared_expert_intermediate_size": "shared_expert_intermediate_size",
    "swiglu_limit": "swiglu_limit",
    "swiglu_alpha": "swiglu_alpha",
    # per-layer limits of a SwiGLU clipped after its activation (MoeSpec activation "swiglu_limited", Ling 3)
    "expert_swiglu_limits": "swiglu_limits",
    "shared_swiglu_limits": "swiglu_limits_shared",
    "router_jitter": "router_jitter_noise",
    "enable_moe": "enable_moe_block",
    "clip_qkv": "clip_qkv",
    "first_dense_layers": "num_dense_layers",
    "routed_scaling": "routed_scaling_factor",
    # a multiplier of the router logits before their scores (Muse-Spark's output_multiplier); no config has the default
    "router_logit_scale": "router_logit_multiplier",
    # the learned residual gates' logits over it (Muse-Spark; Ergo's have none: 1)
    "residual_gate_temperature": "residual_gate_temperature",
    "router_softcap": "moe_router_logit_softcapping",  # tanh softcap of the router logits (Laguna)
    # the sliding layers' own query heads, kv heads and head_dim, where the config has them (Inkling's swa_*)
    "sliding_heads": "swa_num_attention_heads",
    "sliding_kv_heads": "swa_num_key_value_heads",
    "sliding_head_dim": "swa_head_dim",
    "expert_gate_softcap": "mlp_gate_softcap",  # MoeSpec activation "swiglu_softcapped" (Inkling2)
    "expert_up_softcap": "mlp_up_softcap",
    "zero_experts": "zero_expert_num",  # experts that return their input (LongCat-Flash)
    "last_sparse_layer": "moe_layer_end_index",  # ERNIE-4.5-MoE: no experts after it (-1: none)
    "shared_experts": "n_shared_experts",  # the shared expert's width in experts (shared_width "per_expert")
    "expert_groups": "n_group",  # grouped selection (routing "sigmoid_group_biased")
    "expert_groups_kept": "topk_group",
    "routing_norm_min": "moe_norm_min",  # ERNIE-4.5-MoE: the top-k sum's floor
    # Cohere2-MoE / EXAONE-MoE (their mlp_layer_types: above): the shared expert
    # added to the routed output ("sum") or averaged with it ("average"); RMSNorms where rms_norm_eps
    # is set; the dense prefix layers' window pattern (1: full attention, with RoPE)
    "shared_combination": "shared_expert_combination_strategy",
    "rms_norm_switch": "rms_norm_eps",
    "dense_prefix_window_pattern": "prefix_dense_sliding_window_pattern",
    "expert_selection": "expert_selection_fn",
    # DeepSeek: grouped expert selection
    "expert_topk_method": "topk_method",
    # multi-head latent attention (DeepSeek-V2/V3)
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "rope_interleave": "rope_interleave",
    # values narrower than keys in ordinary attention (MiMo-V2-Flash's v_head_dim; no default spelling)
    "value_head_dim": "value_head_dim",
    # DeepSeek sparse attention (DeepSeek-V3.2): the keys its indexer keeps per query
    "index_topk": "index_topk",
    # MiniMax-M3's block-sparse indexer: the key blocks it keeps per query and their size
    "index_topk_blocks": "index_topk_blocks",
    "index_block_size": "index_block_size",
    "dynamic_keep_window": "keep_window_size",  # Doge: the dynamic mask's top-k keys (the context cap)
    # Qwen4-Exp's QSA indexer: the tokens of complete key blocks it keeps per query and the block size
    "qsa_budget": "indexer_budget",
    "qsa_block": "indexer_compress_ratio",
    # second-wave dense families
    "norm_eps": "rms_norm_eps|layer_norm_eps|norm_epsilon|norm_eps",
    "logit_scale": "logit_scale",
    "parallel_residual": "use_parallel_residual",
    # hybrid decoders (LFM2): the short convolution's kernel and the MLP width rule (block_auto_adjust_ff_dim)
    "conv_kernel": "conv_L_cache",
    "ffn_auto_adjust": "block_auto_adjust_ff_dim",
    "ffn_multiplier": "block_ffn_dim_multiplier",
    "ffn_multiple_of": "block_multiple_of",
    # hybrid decoders (Qwen3.5): the gated-DeltaNet layers' conv kernel and head shapes
    "linear_conv_kernel": "linear_conv_kernel_dim",
    "linear_key_heads": "linear_num_key_heads",
    "linear_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_bounded_decay": "kda_safe_gate",  # Ling 3: the bounded KDA forget gate (MixerSpec.bounded_decay)
    "linear_decay_bound": "kda_lower_bound",
    "linear_neg_eigval": "linear_allow_neg_eigval",  # OLMo-Hybrid: beta = 2 sigmoid(b) (MixerSpec.neg_eigval)
    # the gated norm's gate activation where the config picks it (GatedDeltaNetNames.gate "config", Qwen4-Exp)
    "linear_output_gate": "output_gate_type|hidden_act",
    # hybrid decoders (Granite-4.0-H): Mamba2 shapes, and whether the attention layers use RoPE
    "mamba_heads": "mamba_n_heads",
    "mamba_groups": "mamba_n_groups",
    "mamba_state": "mamba_d_state",
    "mamba_head_dim": "mamba_d_head",
    "mamba_conv_kernel": "mamba_d_conv",
    "mamba_expand": "mamba_expand",
    "mamba_dt_limit": "time_step_limit",
    "mamba_dt_rank": "mamba_dt_rank",  # Mamba (v1, Jamba): dt's low-rank width R
    "mamba_norm_eps": "mixer_rms_eps",  # Mamba (v1): the eps of Falcon-Mamba's weightless dt/B/C norms
    "mamba_inner": "mamba_intermediate_size",  # Mamba (v1): a config's own inner width (else expand * hidden)
    "mamba_norm_before_gate": "mamba_norm_before_gate",  # Falcon-H1's gated-norm order
    "mamba_activation": "mamba_hidden_act",
    # RG-LRU (RecurrentGemma): the recurrence's width (None: hidden_size) and its conv's kernel
    "rglru_width": "lru_width",
    "rglru_conv_kernel": "conv1d_width",
    "position_embedding_type": "position_embedding_type",
    "rope_flag": "use_mem_rope",  # rope_layers "if_flag" (Zamba2's shared attention)
    "rope_theta": "rope_parameters.rope_theta|rope_theta",  # rope_layers "if_theta" (OLMo-Hybrid: NoPE without one)
    # the classic decoders (arch/classic_families.py): kv heads and the flags that set them (Falcon),
    # the MLP width (or its ratio to hidden_size), a rotary width in channels, ALiBi's slope range
    "kv_heads": "num_key_value_heads",
    "per_layer_heads": "num_attention_heads_per_layer",  # each layer's query heads (Laguna)
    "multi_query": "multi_query",
    "grouped_kv": "new_decoder_architecture",
    "ffn_ratio": "expansion_ratio",
    "alibi_bias_max": "alibi_bias_max",
    "head_activation": "classifier_activation",  # ArchSpec.head_transform's activation (ModernBERT)
    # residual-stream mechanisms (arch/stream_spec.py): alternating updates, activation sparsity,
    # the per-layer embedding table's id range
    "altup_streams": "altup_num_inputs",
    "altup_active": "altup_active_idx",
    "altup_correct_scale": "altup_correct_scale",
    "activation_sparsity": "activation_sparsity_pattern",
    "hc_streams": "hc_mult",  # hyper-connection residual copies, their post scale and gate epsilon
    "hc_magnitude": "hc_magnitude",
    "hc_eps": "hc_eps",
    "hc_sinkhorn_iters": "hc_sinkhorn_iters",  # DeepSeek-V4's comb normalizations
    "output_groups": "o_groups",  # DeepSeek-V4's grouped low-rank output projection: groups, rank per group
    "output_group_rank": "o_lora_rank",
    "compress_rates": "compress_rates",  # DeepSeek-V4: each compressed layer type's rate
    "per_layer_vocab": "vocab_size_per_layer_input",
    # weight-shared layer stacks run in cycles (ArchSpec.recurrent_stacks, HRM-Text)
    "layers_per_stack": "num_layers_per_stack",
    "high_cycles": "H_cycles",
    "low_cycles": "L_cycles",
    # the middle layers run in a loop (ArchSpec.recurrent_loop, Dory)
    "loop_input_layers": "n_input_layers",
    "loop_layers": "n_recurrent_layers",
    "loop_output_layers": "n_output_layers",
    "loop_count": "n_recurrent_loops",
    "loop_cache_mode": "recurrent_kv_cache_mode",
    "loop_end": "loop_end",  # the loop's end layer (exclusive) where a family names it (Inkling2-Loop)
    # nGPT's scale constants (ArchSpec.ngpt, Dory)
    "initializer_range": "initializer_range",
    "ngpt_alpha_init": "ngpt_alpha_init",
}
