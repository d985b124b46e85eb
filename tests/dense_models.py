"""Tiny random dense-decoder checkpoints, second wave (transformers 5.24, CPU, fp32), with the tiny tokenizer.

    from make_tiny import save_dense, FAMILIES, VARIANTS
    p = save_dense("/tmp/x/phi", "phi")
    p = save_dense("/tmp/x/slm_par", "stablelm", use_parallel_residual=True, qk_layernorm=True)
    p = save_dense("/tmp/x/cohere_qk", "cohere", use_qk_norm=True)

Common shape: hidden 64, 4 q heads, 2 kv heads (every family here supports GQA), head_dim 16 (explicit where the
config has a head_dim field, derived as hidden/heads = 16 otherwise), 3 layers, vocab 384, bos 0 / eos 1 / pad 5,
max_position_embeddings 256, intermediate 96.  `**overrides` are config kwargs applied last (a `rope_parameters`
override replaces the whole dict).  Weights: nn.Linear/embeddings N(0, 0.1) (initializer_range=0.1); then
every norm weight 1+0.3N (Nemotron LayerNorm1P: stored 0.3N, i.e. effective weight 1+0.3N), every norm bias and
every linear bias 0.2N, xIELU alpha_p/alpha_n raw parameters softplus^-1(0.8)+0.3N and its `beta` buffer 0.5+0.1N.
The tiny tokenizer is saved with it.  Same seed -> bit-identical checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from classic_models import CLASSIC_FAMILIES, classic_config
from llama_like_models import CONFIGS as LLAMA_LIKE_CONFIGS
from llama_like_models import FAMILIES as LLAMA_LIKE_FAMILIES
from tiny_models import save_tokenizer, spelled_for_installed_transformers
from transformers import AutoConfig, AutoModelForCausalLM

FAMILIES = [
    "phi",
    "olmo",
    "olmo3",
    "nemotron",
    "stablelm",
    "starcoder2",
    "cohere",
    "cohere2",
    "glm4",
    "exaone4",
    "ernie4_5",
    "hunyuan_v1_dense",
    "apertus",
    "lfm2",
    "lfm3",
    "qwen3_5_text",
    "lfm2_moe",
    "qwen3_5_moe_text",
    "qwen3_next",
    "lara_mini",
    "qwen4_exp_text",
    "olmo_hybrid",
    "minimax",
    "granitemoehybrid",
    "jamba",
    "falcon_h1",
    "nemotron_h",
    *CLASSIC_FAMILIES,
    *LLAMA_LIKE_FAMILIES,  # tests/llama_like_models.py
    "falcon",
    "bloom",
    "mpt",
    "codegen",
]

NEMOTRON_H_MOE = dict(
    layers_block_type=["linear_attention", "full_attention", "moe", "mlp", "linear_attention", "moe"],
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    moe_shared_expert_intermediate_size=48,
    n_group=4,
    topk_group=2,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)

# extra variants that verify.py also checks: tag -> (model_type, overrides)
VARIANTS = {
    "phi_qkln": ("phi", dict(qk_layernorm=True)),
    "stablelm_par_qkln": ("stablelm", dict(use_parallel_residual=True, qk_layernorm=True)),
    "cohere_qknorm": ("cohere", dict(use_qk_norm=True)),
    "ernie4_5_bias": ("ernie4_5", dict(use_bias=True)),
    "exaone4_nosliding": (
        "exaone4",
        dict(sliding_window=None, layer_types=["full_attention"] * 3),
    ),  # EXAONE-4.0-1.2B style
    "olmo_noclip": ("olmo", dict(clip_qkv=None)),
    # HyperCLOVAX without its peri-layer norms (use_post_norm false: Granite's pre-norm layers)
    "hyperclovax_no_post_norm": ("hyperclovax", dict(use_post_norm=False)),
    # Dory's last_loop caches: one per stored layer, written by the last pass, read by the earlier ones
    "dory_last_loop": ("dory", dict(recurrent_kv_cache_mode="last_loop")),
    # Falcon-40B/180B's layout: 2 kv groups of 2 query heads, ln_attn + ln_mlp, every bias (seed 8: with
    # these biases seeds 0-7 repeat a few tokens under 5.24 or 4.57)
    "falcon_grouped": ("falcon", dict(new_decoder_architecture=True, num_kv_heads=2, bias=True, seed=8)),
    # a sequential Falcon (parallel_attn false: input_layernorm, then post_attention_layernorm), one kv head
    "falcon_sequential": ("falcon", dict(parallel_attn=False)),
    # LFM2 with every bias (in_proj, conv, out_proj: the official builder drops two), kernel 4,
    # attention first, the pattern spelled as full_attn_idxs, the MLP width as configured
    "lfm2_bias": (
        "lfm2",
        dict(conv_bias=True, conv_L_cache=4, layer_types=None, full_attn_idxs=[0, 3], block_auto_adjust_ff_dim=False),
    ),
    # LFM3 without its sandwich norms and head gates (use_sandwich_norm, use_attention_gate false)
    "lfm3_plain": ("lfm3", dict(use_sandwich_norm=False, use_attention_gate=False)),
    # Nemotron-H with mixture-of-experts layers: pattern M * E - M E; 8 ungated squared-ReLU experts of
    # 32 in 4 groups, the top 2 of the 2 best groups (sigmoid scores + e_score_correction_bias),
    # renormalized, x2.5; a 48-wide squared-ReLU shared expert
    "nemotron_h_moe": ("nemotron_h", NEMOTRON_H_MOE),
    # OLMo-Hybrid as released: NoPE (rope_parameters without a rope_theta), beta = sigmoid(b)
    "olmo_hybrid_nope": (
        "olmo_hybrid",
        dict(rope_parameters={"rope_type": "default", "rope_theta": None}, linear_allow_neg_eigval=False),
    ),
    # GPT-BigCode without multi_query (c_attn per head [q k v], as many kv heads as heads)
    "gpt_bigcode_mha": ("gpt_bigcode", dict(multi_query=False)),
}

COMMON = dict(
    vocab_size=384,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    intermediate_size=96,
    max_position_embeddings=256,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=5,
    initializer_range=0.1,
)
SWA3 = ["sliding_attention", "sliding_attention", "full_attention"]


def family_config(model_type: str) -> dict:
    if model_type in CLASSIC_FAMILIES:  # their own key spellings (tests/classic_models.py)
        return classic_config(model_type)
    c = dict(COMMON)
    if model_type == "phi":  # Phi-2: gelu_new, partial rotary 0.4 (we use 0.5), LN with bias
        c.update(
            hidden_act="gelu_new",
            layer_norm_eps=1e-5,
            qk_layernorm=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    elif model_type == "olmo":  # OLMo-1: parameter-free LayerNorm, clip_qkv
        c.update(
            clip_qkv=1.0,
            attention_bias=False,
            tie_word_embeddings=False,  # 1.0 clips ~20% of q/k/v entries here
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "olmo3":  # post-norm, full-width q/k RMSNorm, SWA 3:1, YaRN on full layers only
        c.update(
            rms_norm_eps=1e-6,
            sliding_window=8,
            layer_types=SWA3,
            tie_word_embeddings=False,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "full_attention": {
                    "rope_type": "yarn",
                    "rope_theta": 500000.0,
                    "factor": 8.0,
                    "original_max_position_embeddings": 32,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "attention_factor": 1.2079441541679836,
                },
            },
        )
    elif model_type == "nemotron":  # LayerNorm1P (weight+1), relu2 non-gated MLP, partial rotary
        c.update(
            head_dim=16,
            hidden_act="relu2",
            norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    elif model_type == "stablelm":  # stablelm-2-1.6b: qkv bias, partial 0.25; 12b: +qk LN, parallel
        c.update(
            layer_norm_eps=1e-5,
            use_qkv_bias=True,
            qk_layernorm=False,
            use_parallel_residual=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    elif model_type == "starcoder2":  # LN+bias everywhere, gelu_tanh plain MLP, SWA on all layers, tied
        c.update(
            hidden_act="gelu_pytorch_tanh",
            norm_epsilon=1e-5,
            use_bias=True,
            sliding_window=8,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
            initializer_range=0.3,  # at 0.1 the tied model copies its last token (1-2 distinct ids)
        )
    elif model_type == "cohere":  # parallel block, mean-sub LN without bias, interleaved RoPE, logit_scale
        c.update(
            layer_norm_eps=1e-5,
            logit_scale=0.25,
            use_qk_norm=False,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "cohere2":  # + SWA 3:1, RoPE only on sliding layers
        c.update(
            layer_norm_eps=1e-5,
            logit_scale=0.25,
            sliding_window=8,
            layer_types=SWA3,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
        )
    elif model_type == "cohere_compass_text":  # Cohere2's layers, rotate-half M-RoPE on sliding layers only
        c.update(
            head_dim=16,
            layer_norm_eps=1e-5,
            logit_scale=0.25,
            sliding_window=8,
            layer_types=SWA3,
            tie_word_embeddings=True,
            # the full layers' entry null: NoPE there; text positions are one axis, M-RoPE's three equal
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 50000.0, "mrope_section": [2, 3, 3]},
                "full_attention": None,
            },
        )
    elif model_type == "glm4":  # sandwich RMSNorms, fused gate_up, qkv bias, partial interleaved RoPE
        c.update(
            head_dim=16,
            rms_norm_eps=1e-5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    elif model_type == "exaone4":  # post-norm, per-head q/k RMSNorm, SWA 3:1, RoPE only on sliding
        c.update(
            head_dim=16,
            rms_norm_eps=1e-5,
            sliding_window=8,
            sliding_window_pattern=4,
            layer_types=SWA3,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 1000000.0,
                "factor": 16.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    elif model_type == "ernie4_5":  # llama-like but GPT-J interleaved RoPE, tied
        c.update(
            head_dim=16,
            rms_norm_eps=1e-5,
            use_bias=False,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    elif model_type == "hunyuan_v1_dense":  # per-head q/k RMSNorm AFTER RoPE, NTK-alpha ("dynamic"+alpha) RoPE
        c.update(
            head_dim=16,
            rms_norm_eps=1e-5,
            attention_bias=False,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
        )
    elif model_type in ("apertus", "apertus1p5_text"):  # xIELU up/down MLP, per-head q/k RMSNorm, llama3 RoPE
        if model_type == "apertus1p5_text":  # Apertus-1.5: the lm_head pruned to the first 320 of 384 ids
            c.update(output_vocab_size=320)
        c.update(
            head_dim=16,
            rms_norm_eps=1e-5,
            hidden_act="xielu",
            attention_bias=False,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 12000000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    elif model_type == "lfm2":  # short-conv (state) + GQA layers, q/k RMSNorm, MLP width 2/3 rounded up
        c.update(
            num_hidden_layers=4,
            layer_types=["conv", "full_attention", "conv", "conv"],
            conv_L_cache=3,
            conv_bias=False,
            norm_eps=1e-5,
            block_auto_adjust_ff_dim=True,
            block_ffn_dim_multiplier=1.5,
            block_multiple_of=32,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    elif model_type == "lfm2_moe":  # LFM2 + a dense first layer, then sigmoid-routed experts with a selection bias
        c.update(
            num_hidden_layers=4,
            layer_types=["conv", "full_attention", "conv", "conv"],
            conv_L_cache=3,
            norm_eps=1e-5,
            num_dense_layers=1,
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            use_expert_bias=True,
            norm_topk_prob=True,
            routed_scaling_factor=1.5,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    elif model_type == "lfm3":  # LFM2's conv layers, sliding and full gated attention layers, sandwich norms
        c.update(
            num_hidden_layers=4,
            layer_types=["conv", "sliding_attention", "conv", "full_attention"],
            head_dim=16,
            sliding_window=8,
            conv_L_cache=3,
            norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
            },
        )
    elif model_type == "qwen3_5_text":  # gated DeltaNet (conv + recurrent state) + gated GQA layers
        c.update(
            num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            head_dim=64,  # partial rotary 0.25: 16 rotary dims, which GQA's fused RoPE takes
            linear_conv_kernel_dim=4,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        )
    elif model_type == "qwen3_5_moe_text":  # Qwen3.5 + experts (softmax top-k, renormalized) + shared expert
        c = family_config("qwen3_5_text")
        c.update(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
    elif model_type == "qwen3_next":  # Qwen3.5-MoE's layers with the DeltaNet projections fused per key head
        c = family_config("qwen3_5_text")
        del c["layer_types"]
        c.update(
            full_attention_interval=2,  # linear/full/linear/full, as the hub configs spell the pattern
            linear_value_head_dim=32,  # dv != dk: the fused rows' v and z pieces are wider than q and k
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            mlp_only_layers=[2],  # a dense MLP (intermediate_size) on a DeltaNet layer
            norm_topk_prob=False,  # the top-k weights as the softmax gave them (the config decides)
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        )
    elif model_type == "lara_mini":  # DeltaNet / sliding (RoPE) / DeltaNet / full (NoPE), experts on every layer
        c = family_config("qwen3_5_text")
        c.update(
            layer_types=["linear_attention", "sliding_attention", "linear_attention", "full_attention"],
            sliding_window=8,
            head_dim=16,
            linear_value_head_dim=32,  # dv != dk: the stacked in_proj's pieces differ in width
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            norm_topk_prob=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "qwen4_exp_text":  # Qwen3.5-MoE's layers on 3 hyper-connection copies, QSA, no PLE
        # (head_dim 64 as Qwen3.5's: 16 rotary dims, within the indexer's head of 16 as its config requires)
        c = family_config("qwen3_5_moe_text")
        c.update(
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],  # as the hub
            linear_value_head_dim=24,  # dv != dk
            num_experts=7,
            norm_topk_prob=True,
            hc_count=3,
            hc_lowrank=10,
            ple_layer_ids=[],
            # QSA: 24 blocks of 5 keys, so every key of up to 124 visible ones is kept (the package's context,
            # past every prompt + decode here; tests/arch/test_qwen4_exp.py checks a cap of 11)
            indexer_n_heads=3,
            indexer_kv_heads=1,
            indexer_head_dim=16,
            indexer_budget=120,
            indexer_compress_ratio=5,
        )
    elif model_type == "olmo_hybrid":  # OLMo-3 post-norm attention + pre-norm gated-DeltaNet layers
        c.update(
            num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_num_key_heads=2,
            linear_num_value_heads=4,  # two value heads per key head
            linear_key_head_dim=16,
            linear_value_head_dim=32,
            linear_allow_neg_eigval=True,  # beta = 2 sigmoid(b)
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    elif model_type == "minimax":  # lightning-attention + GQA layers, experts on every layer, scaled normed residuals
        c.update(
            num_hidden_layers=4,
            # lightning first, as the released checkpoints; its decay is steep at layer 0, a third of
            # that at layer 2 and nearly none at the last
            layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
            head_dim=16,
            intermediate_size=32,  # each expert's width
            num_local_experts=4,
            num_experts_per_tok=2,
            block_size=16,  # HF's prompt blocks: the 70-token prompt spans five, the last partial
            # each block kind's alpha / beta away from 1 and from the others (a swap moves the logits)
            full_attn_alpha_factor=1.4,
            full_attn_beta_factor=0.9,
            linear_attn_alpha_factor=1.6,
            linear_attn_beta_factor=0.8,
            mlp_alpha_factor=1.2,
            mlp_beta_factor=0.6,
            rms_norm_eps=1e-5,  # the lightning norm's own eps is 1e-6
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "kimi_linear":  # KDA + NoPE latent attention, a dense MLP then experts (tests/kimi_models.py)
        c.update(
            num_key_value_heads=4,  # MLA: one kv head per query head
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"],
            linear_num_heads=2,
            linear_head_dim=16,
            linear_conv_kernel_dim=4,
            q_lora_rank=None,  # Kimi-Linear-48B's: q_proj, no query LoRA
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,  # a key of 24 (a multiple of 8 for GQA), values of 16 padded to it
            v_head_dim=16,
            num_local_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        )
    elif model_type == "bailing_hybrid":  # bounded KDA + gated MLA with RoPE pairs, clipped experts (Ling 3)
        c.update(
            num_hidden_layers=2,  # HF's reference KDA and experts are python loops: two layers keep it quick
            num_key_value_heads=4,  # MLA: one kv head per query head
            layer_types=["linear_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            head_dim=16,  # the KDA heads' width (linear_head_dim); the class then sets head_dim to qk_rope_head_dim
            short_conv_kernel_size=4,
            kda_lower_bound=-1.0,  # a decay of about exp(-0.5) a token: the state outlives a few tokens
            q_lora_rank=16,  # the query LoRA too (its norm at eps 1e-6)
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            num_local_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            # limits that clip a share of the tiny activations (layer 0 is dense: never clipped)
            expert_swiglu_limit_list=[0.0, 0.05],
            share_expert_swiglu_limit_list=[0.0, 0.05],
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "granitemoehybrid":  # Mamba2 (conv + SSM state) + NoPE GQA layers, experts + shared MLP
        c.update(
            num_hidden_layers=4,
            layer_types=["mamba", "attention", "mamba", "mamba"],
            mamba_n_heads=4,  # head dim 2 * 64 / 4 = 32
            mamba_n_groups=2,  # two consecutive heads per B/C group
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            mamba_conv_bias=True,
            position_embedding_type="nope",
            num_local_experts=4,
            num_experts_per_tok=2,
            intermediate_size=32,
            shared_intermediate_size=48,
            embedding_multiplier=2.0,  # Granite's multipliers, each away from 1 (tied, x12, x0.22: a copying model)
            attention_multiplier=0.0625,
            residual_multiplier=0.5,
            logits_scaling=2.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
    elif model_type == "jamba":  # Mamba (v1: conv + per-channel SSM state) + NoPE GQA layers, experts on a grid
        c.update(
            num_hidden_layers=5,
            attn_layer_period=2,  # attention at 1 and 3, Mamba at 0, 2 and 4
            attn_layer_offset=1,
            expert_layer_period=3,  # experts at 0 (Mamba) and 3 (attention), a dense MLP elsewhere
            expert_layer_offset=0,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,  # 128 channels
            mamba_dt_rank=8,
            mamba_conv_bias=True,
            use_mamba_kernels=False,  # 4.57 runs its CPU path only so (5.x picks it itself, warns, ignores it)
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
    elif model_type == "falcon_h1":  # attention and Mamba2 side by side in every layer, µP multipliers
        c.update(
            mamba_d_ssm=96,  # the mixer's inner width, not expand * hidden: 4 heads of 24
            mamba_n_heads=4,
            mamba_d_head=24,
            mamba_n_groups=2,  # two consecutive heads per B/C group
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            mamba_conv_bias=True,
            mamba_rms_norm=True,  # the gated group-wise norm, normalizing before the gate
            mamba_norm_before_gate=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            # every multiplier away from 1 and from the others (one dropped or swapped moves the logits)
            embedding_multiplier=1.5,
            lm_head_multiplier=0.75,
            attention_in_multiplier=1.3,
            key_multiplier=0.6,
            attention_out_multiplier=0.8,
            ssm_in_multiplier=1.25,
            ssm_out_multiplier=0.7,
            ssm_multipliers=[0.5, 1.5, 0.8, 1.2, 0.9],  # z | x | B | C | dt
            mlp_multipliers=[1.4, 0.6],  # gate, down
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
        )
    elif model_type == "nemotron_h":  # one block per layer: Mamba2 (M), NoPE GQA (*), squared-ReLU MLP (-)
        c.update(
            layers_block_type=["linear_attention", "full_attention", "mlp", "linear_attention", "mlp"],  # M*-M-
            head_dim=16,
            mamba_num_heads=4,
            mamba_head_dim=32,
            n_groups=2,  # two consecutive heads per B/C group; the gated norm is per group of 64
            ssm_state_size=16,
            conv_kernel=4,
            chunk_size=16,  # the 70-token prompt spans several of HF's chunks
            # HF floors dt at 0.5 in prompts only (about a third of the dt values): transformers < 5.25 at
            # time_step_min, >= 5.25 at time_step_limit's min; both given, the row is the same in either
            time_step_min=0.5,
            time_step_limit=(0.5, float("inf")),
            layer_norm_epsilon=1e-5,
        )
        del c["num_hidden_layers"]  # the pattern's length
    elif model_type in LLAMA_LIKE_CONFIGS:
        c.update(LLAMA_LIKE_CONFIGS[model_type])
        if model_type == "hrm_text":  # multi-head attention: its config class has no num_key_value_heads
            del c["num_key_value_heads"]
    elif model_type == "falcon":  # Falcon-7B: multi-query, parallel attention + MLP off one LayerNorm, tied
        for key in ("num_key_value_heads", "intermediate_size"):
            c.pop(key)
        c.update(
            ffn_hidden_size=96,
            multi_query=True,
            parallel_attn=True,
            new_decoder_architecture=False,
            alibi=False,
            bias=False,
            activation="gelu",
            layer_norm_epsilon=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    elif model_type == "bloom":  # bloom-560m's shape: MHA, ALiBi, embedding LayerNorm
        for key in ("num_key_value_heads", "intermediate_size", "max_position_embeddings"):
            c.pop(key)
        # untied: the tiny tied model copies its last token (the tied table path is Falcon's row)
        c.update(
            n_layer=c.pop("num_hidden_layers"),
            n_head=c.pop("num_attention_heads"),
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=False,
        )
    elif model_type == "mpt":  # mpt-7b's layout: ALiBi, no biases, tied; clip_qkv 1.0 clips ~20% here
        for key in ("num_key_value_heads", "intermediate_size", "max_position_embeddings", "initializer_range"):
            c.pop(key)
        c.update(
            d_model=c.pop("hidden_size"),
            n_heads=c.pop("num_attention_heads"),
            n_layers=c.pop("num_hidden_layers"),
            max_seq_len=256,
            layer_norm_epsilon=1e-5,
            initializer_range=0.1,
            attn_config={"clip_qkv": 1.0, "softmax_scale": 0.3, "alibi": True, "alibi_bias_max": 8},
        )
    elif model_type == "codegen":  # codegen-350M's layout: parallel block, 4 qkv blocks, GPT-J RoPE on half the head
        for key in ("num_key_value_heads", "intermediate_size", "max_position_embeddings"):
            c.pop(key)
        c.update(
            n_embd=c.pop("hidden_size"),
            n_head=c.pop("num_attention_heads"),
            n_layer=c.pop("num_hidden_layers"),
            n_positions=256,
            n_inner=96,
            rotary_dim=8,
            activation_function="gelu_new",
            layer_norm_epsilon=1e-5,
            tie_word_embeddings=False,
        )
    else:
        raise ValueError(model_type)
    return c


# Qwen3.5's (1 + w) RMSNorms (the DeltaNet's gated norm aside): the stored weight is drawn around 0
QWEN_ZERO_CENTRED = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "qwen4_exp_text")


def _randomize(model, model_type: str, g: torch.Generator):
    def rn(t, std, mean=0.0):
        return (torch.randn(t.shape, generator=g) * std + mean).to(t.dtype)

    with torch.no_grad():
        for name, p in model.named_parameters():
            mod, leaf = name.rsplit(".", 1)
            leaf_module = mod.rsplit(".", 1)[-1]
            is_norm = (
                "norm" in leaf_module or ".norms." in mod or mod.endswith("layernorm") or leaf_module.startswith("ln_")
            )
            if is_norm and leaf == "weight":
                zero_centred = model_type in QWEN_ZERO_CENTRED and not mod.endswith("linear_attn.norm")
                if model_type == "nemotron" or zero_centred:
                    p.copy_(rn(p, 0.3))  # LayerNorm1P, Qwen3.5's zero-centred RMSNorm: effective weight = stored + 1
                else:
                    p.copy_(rn(p, 0.3, 1.0))
            elif mod.endswith(("input_mix_weight_down", "input_mix_weight_up")):  # Qwen4-Exp's low-rank stream mixer:
                p.copy_(rn(p, 0.3 if mod.endswith("down") else 1.0))  # its sigmoid weights spread over (0, 1) by token
            elif leaf in ("bias", "dense_bias"):  # LayerNorm and Linear biases, GPT-NeoX-Japanese's last attention's
                p.copy_(rn(p, 0.2))
            elif name.endswith("conv.conv.weight"):  # LFM2's depthwise kernel: large enough to matter
                p.copy_(rn(p, 0.5))
            elif name.endswith(
                ("linear_attn.conv1d.weight", "mamba.conv1d.weight", "mixer.conv1d.weight", "self_attn.conv1d.weight")
            ):
                p.copy_(rn(p, 0.5))  # Qwen3.5's and Mamba2's depthwise kernels
            elif leaf == "D":  # Mamba2's skip: away from its init of ones
                p.copy_(rn(p, 0.5, 1.0))
            elif leaf == "A_log":  # decay rates exp(A_log) ~ 0.05-0.5: the state outlives a few tokens
                p.copy_(rn(p, 0.5, -2.0))
            elif model_type == "dory" and leaf.startswith("lambda_"):  # nGPT's interpolation rates: |lambda| / 2
                p.copy_(rn(p, 0.3, 0.5))
            elif model_type == "dory" and leaf in ("sqk", "s_gate", "suv_gate", "suv_up", "logit_scale"):
                # nGPT's per-channel scales (init: initializer_range, ones): every channel its own, the logits x ~20
                mean = {"suv_gate": 1.0, "suv_up": 1.0, "logit_scale": 2.0}.get(leaf, 0.1)
                p.copy_(rn(p, 0.3 * mean, mean))
            elif leaf.startswith("lambda_"):  # DiffLlama's lambda vectors: lambda about 0.5 + lambda_init
                p.copy_(rn(p, 0.2))
            elif leaf == "A" or leaf.endswith("_residual"):  # Doge's dt scale (zeros) and residual vectors (ones)
                p.copy_(rn(p, 0.5, 1.0 if leaf.endswith("_residual") else 0.0))
            elif leaf == "z_L_init":  # HRM-Text's low stream's start (zeros at init)
                p.copy_(rn(p, 1.0))
            elif leaf == "sinks":  # GraniteSWA's per-head sink logits (zeros at init)
                p.copy_(rn(p, 1.0))
            elif leaf == "dt_bias":
                p.copy_(rn(p, 0.3))
            elif leaf == "e_score_correction_bias":  # ERNIE-4.5-MoE's (a parameter): probs are ~1/E
                p.copy_(rn(p, 0.05))
            elif leaf == "alpha_p":  # xIELU raw params (softplus applied at runtime)
                p.copy_(rn(p, 0.3, math.log(math.expm1(0.8))))
            elif leaf == "alpha_n":
                p.copy_(rn(p, 0.3, math.log(math.expm1(0.8 - 0.5))))
        for name, b in model.named_buffers():
            if name.endswith("act_fn.beta"):
                b.copy_(rn(b, 0.1, 0.5))
            elif name.endswith("expert_bias") or name.endswith("e_score_correction_bias"):
                b.copy_(rn(b, 0.3))  # LFM2-MoE, GLM-4-MoE: steers the choice away from the top scores


def build_model(model_type: str, seed: int = 0, **overrides):
    cfg_kw = family_config(model_type)
    cfg_kw.update(overrides)
    # under transformers 4.x, written the way 4.x writes real checkpoints (tiny_models.py)
    config = AutoConfig.for_model(model_type, **spelled_for_installed_transformers(cfg_kw, model_type))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    _randomize(model, model_type, torch.Generator().manual_seed(seed + 1))
    return model


def save_dense(out_dir, model_type: str, seed: int = 0, **overrides) -> Path:
    """Build the tiny random model (see module doc) and save_pretrained it (safetensors) to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(model_type, seed, **overrides)
    model.save_pretrained(out)
    save_tokenizer(out, vocab_size=384)
    return out
