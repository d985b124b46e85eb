"""Tiny configs of the mixtures of experts that are another family's layers with a mechanism changed
(issue #39 item 3, gqa_export/arch/derived_moe_families.py), on tests/moe_models.py's common shape;
moe_models.family_config reads them from here. Each config makes its mechanism matter.
"""

from __future__ import annotations

from typing import Any

import torch

# DeepSeek-V3's tiny YaRN (factor 4 past 64 positions, mscale_all_dim 0.8), shared by the latent-attention rows
YARN_MSCALE = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "mscale": 1.0,
    "mscale_all_dim": 0.8,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}

# model_type -> (config kwargs applied over moe_models.COMMON, COMMON keys the class does not take)
CONFIGS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # GraniteMoE's tiny config (multipliers, tied, top 2 of 8) with a 48-wide gated shared MLP
    "granitemoeshared": (
        dict(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            shared_intermediate_size=48,
            tie_word_embeddings=True,
            embedding_multiplier=12.0,
            attention_multiplier=0.0625,
            residual_multiplier=0.22,
            logits_scaling=6.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6,
            initializer_range=0.7,  # GraniteMoE's: tied, embedding x12, residual x0.22
        ),
        ("head_dim",),
    ),
    # GraniteMoE-SWA: GraniteMoE's multipliers and top 2 of 8 without the shared MLP (the class's
    # shared_intermediate_size 0), sinks on every layer, layer 0 full, 1-2 sliding (window 8), a RoPE
    # base per layer: the global one, none (NoPE), another
    "granitemoe_swa": (
        dict(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            sliding_window=8,
            layer_rope_theta=[10000.0, 0, 500000.0],
            embedding_multiplier=6.0,
            attention_multiplier=0.125,
            residual_multiplier=0.5,
            logits_scaling=2.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6,
            initializer_range=0.3,
        ),
        ("head_dim",),
    ),
    # LongCat-Flash: 2 layers of two MLA sublayers each (4 KV caches; q-LoRA, rope head_dim = qk_rope 8,
    # values 16 padded to 24), a 96-wide dense MLP per sublayer, a shortcut MoE of 8 real experts 32 wide
    # and 4 zero experts, the top 3 of 12 times 2.5 (not renormalized)
    "longcat_flash": (
        dict(
            num_layers=2,
            num_key_value_heads=4,
            head_dim=8,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            ffn_hidden_size=96,
            expert_ffn_hidden_size=32,
            n_routed_experts=8,
            zero_expert_num=4,
            moe_topk=3,
            routed_scaling_factor=2.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5,
        ),
        ("num_hidden_layers", "head_dim"),
    ),
    # FlexOlmo: OLMo-2's post-norm layers with OLMoE's router, the top 2 of 8 renormalized
    "flex_olmo": (
        dict(
            num_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            norm_topk_prob=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            rms_norm_eps=1e-6,
        ),
        ("head_dim",),
    ),
    # Cohere2-MoE: LayerNorms (no rms_norm_eps), layer 0 dense (a 96-wide MLP, full attention with RoPE:
    # prefix_dense_sliding_window_pattern 1), then sliding / global (NoPE) / sliding sparse layers, the
    # top 2 of 8 experts 32 wide averaged with a 32-wide shared expert
    "cohere2_moe": (
        dict(
            num_hidden_layers=4,
            first_k_dense_replace=1,
            sliding_window=8,
            sliding_window_pattern=2,
            num_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            prefix_dense_intermediate_size=96,
            num_shared_experts=1,
            shared_expert_combination_strategy="average",
            logit_scale=0.5,
            layer_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_theta=10000.0,
        ),
        (),
    ),
    # EXAONE-MoE: layer 0 dense (96 wide), then sliding / global (NoPE) / global layers (pattern 2, the last
    # global); 12 experts in 3 groups, the 2 best kept, top 3 on sigmoid + selection bias, x2.5, a shared expert
    "exaone_moe": (
        dict(
            num_hidden_layers=4,
            first_k_dense_replace=1,
            sliding_window=8,
            sliding_window_pattern=2,
            num_experts=12,
            num_experts_per_tok=3,
            n_group=3,
            topk_group=2,
            moe_intermediate_size=32,
            num_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        (),
    ),
    # DBRX: its own spellings (d_model, n_heads, n_layers, attn_config, ffn_config), 2 kv heads,
    # clip_qkv 1.0 (clamps a share of the q/k/v entries here), the top 2 of 8 experts renormalized
    "dbrx": (
        dict(
            d_model=64,
            n_heads=4,
            n_layers=3,
            max_seq_len=256,
            attn_config={"kv_n_heads": 2, "clip_qkv": 1.0, "rope_theta": 500000.0},
            ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 8, "moe_top_k": 2},
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        ),
        (
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "num_hidden_layers",
            "max_position_embeddings",
        ),
    ),
    # JetMoE: 4 attention experts (2 kv heads of 16 each) and 4 MLP experts, the top 2 of each
    "jetmoe": (
        dict(
            kv_channels=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            intermediate_size=32,
            activation_function="silu",
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            initializer_range=0.2,  # at 0.1 the continuations repeat one or two ids
        ),
        ("head_dim", "num_attention_heads"),
    ),
    # Sarvam-MoE: GLM-4-MoE's routing (12 experts in 3 groups, the 2 best kept, top 3 on sigmoid +
    # selection bias, x2.5, a shared expert), a dense layer 0, RoPE over the whole head (the class's
    # default), q/k/v biases in the fused query_key_value, per-head q/k norms
    "sarvam_moe": (
        dict(
            first_k_dense_replace=1,
            n_routed_experts=12,
            num_experts_per_tok=3,
            n_group=3,
            topk_group=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            attention_bias=True,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        (),
    ),
    # Param2-MoE (transformers 5.25): Sarvam-MoE's tiny config under its own config class, with that
    # class's defaults where they differ: tied embeddings (tie_word_embeddings dropped from the common
    # keys), RoPE base 500000 (no rope_parameters given)
    "param2moe": (
        dict(
            first_k_dense_replace=1,
            n_routed_experts=12,
            num_experts_per_tok=3,
            n_group=3,
            topk_group=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            attention_bias=True,
            rms_norm_eps=1e-6,
        ),
        ("tie_word_embeddings",),
    ),
    # MiniCPM5-MoE (transformers 5.25): the output gate in q_proj, no q/k norms, full RoPE; layer 0 dense
    # (mlp_layer_types), then 12 experts in 3 groups (2 kept), top 3 on sigmoid + selection bias, x2.5,
    # a shared expert
    "minicpm5_moe": (
        dict(
            mlp_layer_types=["dense", "sparse", "sparse"],
            n_routed_experts=12,
            num_experts_per_tok=3,
            n_group=3,
            topk_group=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            initializer_range=0.2,  # at 0.1 the int8 package's smoke run ends at EOS
        ),
        (),
    ),
    # MiniMax-M3's text decoder: Gemma norms, per-head q/k norms, layer 0 dense (96 wide), then the top 2 of
    # 8 experts (32 wide) on sigmoid + selection bias, renormalized, x2, beside a 24-wide shared expert, all
    # with the clamped SwiGLU at limit 1.5 (many pre-activations past it); layer 1 block-sparse, 16 blocks
    # of 8 keys kept: every key of the registry's contexts (the package's max_length is capped at 128).
    # rotary_dim = head_dim: the class rotates every channel whatever rotary_dim says (docs/moe.md)
    "minimax_m3_vl_text": (
        dict(
            layer_types=["full_attention", "minimax_m3_sparse", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"],
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            shared_intermediate_size=24,
            dense_intermediate_size=96,
            routed_scaling_factor=2.0,
            swiglu_limit=1.5,
            rotary_dim=16,
            index_n_heads=2,
            index_head_dim=16,
            index_block_size=8,
            index_topk_blocks=16,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            initializer_range=0.2,
        ),
        (),
    ),
    # Aria's text decoder (transformers 5.25): the top 2 of 8 SiLU experts by the softmax of their logits,
    # two shared experts (2 x 32 wide) beside them
    "aria_text": (
        dict(
            moe_num_experts=8,
            moe_topk=2,
            moe_num_shared_experts=2,
            intermediate_size=32,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        (),
    ),
    # dots3-note's decoder: indexed (dense) / sliding (sparse, window 8) / indexed (sparse) layers; the indexed
    # ones DeepSeek-V3.2's MLA (4 heads, q-LoRA 32, latent 32, nope 16, rope 8, values 16 padded to 24) with an
    # indexer keeping 128 keys (every key here; max_length capped at 128), the sliding one its own shapes
    # (per_layer_config: 2 heads, q-LoRA 24, latent 16, nope 24, rope 16, values 20 padded to 40) and rope theta;
    # the top 2 of 8 experts within the best of 2 groups beside a 24-wide shared expert
    "dots3_note_text": (
        dict(
            num_key_value_heads=4,
            head_dim=24,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            layer_types=["indexed_attention", "sliding_attention", "indexed_attention"],
            sliding_window=8,
            per_layer_config={
                1: dict(
                    num_attention_heads=2,
                    num_key_value_heads=2,
                    q_lora_rank=24,
                    kv_lora_rank=16,
                    head_dim=40,
                    qk_nope_head_dim=24,
                    qk_rope_head_dim=16,
                    v_head_dim=20,
                )
            },
            mlp_layer_types=["dense", "sparse", "sparse"],
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            moe_intermediate_size=32,
            intermediate_size=96,
            shared_experts_intermediate_size=24,
            norm_topk_prob=True,
            routed_scaling_factor=2.0,
            index_topk=128,
            index_n_heads=2,
            index_head_dim=16,
            rms_norm_eps=1e-5,
            rope_parameters={
                "indexed_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
            },
        ),
        (),
    ),
    # MiniMax-M2: full-width q/k norms, RoPE on half of each head, the top 2 of 8 experts on sigmoid +
    # selection bias, renormalized
    "minimax_m2": (
        dict(
            num_local_experts=8,
            num_experts_per_tok=2,
            intermediate_size=32,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
            initializer_range=0.2,  # at 0.1 the continuations hold 3 distinct ids
        ),
        (),
    ),
    # AFMoE: layer 0 dense (96 wide), then sliding / global (NoPE) / ... (every 2nd global), window 8; the
    # top 2 of 8 experts on sigmoid + selection bias, renormalized, x2, a 32-wide shared expert; the
    # attention output gated, the embeddings x8 (mup_enabled)
    "afmoe": (
        dict(
            num_hidden_layers=4,
            num_dense_layers=1,
            global_attn_every_n_layers=2,
            sliding_window=8,
            num_experts=8,
            num_experts_per_tok=2,
            num_shared_experts=1,
            moe_intermediate_size=32,
            intermediate_size=96,
            route_scale=2.0,
            mup_enabled=True,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            initializer_range=0.2,  # at 0.1 the int4 package's smoke run ends at EOS after 7 tokens
        ),
        (),
    ),
    # DeepSeek-V3.2: DeepSeek-V3's tiny shape (moe_models' _LATENT: q-LoRA, 2 of 4 groups, YaRN mscale, a
    # dense layer 0) and an indexer of 4 heads x 16 keeping 128 keys per query: every key of the registry's
    # contexts (the package's max_length is capped there, below max_position_embeddings 256)
    "deepseek_v32": (
        dict(
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            q_lora_rank=32,
            first_k_dense_replace=1,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            index_topk=128,
            index_n_heads=4,
            index_head_dim=16,
            rope_parameters=dict(YARN_MSCALE),
        ),
        ("head_dim",),
    ),
    # A.X-K1: DeepSeek-V3's tiny shape (q-LoRA, 2 of 4 groups, YaRN mscale), the dense layer 0 given in
    # the hub's legacy key (the config class turns first_k_dense_replace into mlp_layer_types), and the
    # RMSNorm over the sparse block's output
    "axk1": (
        dict(
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            q_lora_rank=32,
            first_k_dense_replace=1,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            rope_parameters=dict(YARN_MSCALE),
        ),
        ("head_dim",),
    ),
    # Mistral-4: DeepSeek-V3's tiny latent shape (q-LoRA, rope pairs, a dense layer 0) with its published rope
    # spelling (both type keys, yarn, mscale = mscale_all_dim = 1) where the query scale steps every 8 positions
    # (original_max_position_embeddings 8: the 14-token prompt crosses 8, its decode steps 16), beta 0.5 so
    # a skipped scale shows; the top 2 of 8 softmax experts within the best of 2 groups (each scored by its two best:
    # the group's choice matters to every token), renormalized, times 1.5; two layers (dense, sparse)
    "mistral4": (
        dict(
            num_hidden_layers=2,
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            q_lora_rank=32,
            first_k_dense_replace=1,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=2,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=1.5,
            rms_norm_eps=1e-5,
            rope_interleave=True,
            rope_parameters={
                "rope_type": "yarn",
                "type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.5,
            },
        ),
        ("head_dim",),
    ),
    # HY-V3 (Hy3): Qwen3's attention (per-head q/k norms before RoPE, 2 kv heads), layer 0 dense (the class's
    # default mlp_layer_types), then the top 3 of 8 sigmoid experts chosen with the selection bias, renormalized,
    # times router_scaling_factor 2.5, beside 2 shared experts' width
    "hy_v3": (
        dict(
            num_experts=8,
            num_experts_per_tok=3,
            num_shared_experts=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            router_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        (),
    ),
    # Kolibri-1: sliding / full / sliding layers (window 8; RoPE on the sliding ones only), sandwich norms,
    # the top 2 of 8 experts chosen on logits + the selection bias, sigmoid-weighted and renormalized, beside a
    # 48-wide shared expert on every layer
    "kolibri1": (
        dict(
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            sliding_window=8,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            norm_topk_prob=True,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        (),
    ),
    # GLM-MoE-DSA: DeepSeek-V3.2's tiny shape with GLM-5's one expert group, the indexer on layers 0 and 2 and
    # layer 1 reusing layer 0's top 128 keys (every key of the registry's contexts: the package's cap)
    "glm_moe_dsa": (
        dict(
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            q_lora_rank=32,
            first_k_dense_replace=1,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            index_topk=128,
            index_n_heads=4,
            index_head_dim=16,
            indexer_types=["full", "shared", "full"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        ("head_dim",),
    ),
    # A.X-K2: GLM-MoE-DSA's tiny shape (index_topk 128, past every context here) with values narrower than the
    # key (padded in the expanded cache), the query up-projection reading [normed | raw] q latent and yielding a
    # per-channel output gate, the gated RMSNorms (rank 5), routing without groups (n_group null), YaRN mscale,
    # the dense layer 0 from the hub's legacy key
    "axk2": (
        dict(
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            q_lora_rank=24,
            first_k_dense_replace=1,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=None,
            topk_group=None,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            index_topk=128,
            index_n_heads=4,
            index_head_dim=16,
            gated_norm_rank=5,
            rope_parameters=dict(YARN_MSCALE),
        ),
        ("head_dim",),
    ),
    # HunYuan-V4: GLM-MoE-DSA's tiny shape (index_topk 128, past every context here; the indexer on layers 0 and 2,
    # layer 1 reusing layer 0's choice) with values narrower than the key, 3 hyper-connection copies (hc_magnitude
    # 1.7), a sink per head, the value gate, dense / sparse / sparse, the routed SwiGLU clamped at 0.6 (the tiny
    # experts' pre-activations reach past it); the stream maps drawn in `finish` so that pre / post vary by token
    "hy_v4": (
        dict(
            num_key_value_heads=4,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            q_lora_rank=24,
            mlp_layer_types=["dense", "sparse", "sparse"],
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rms_norm_eps=1e-5,
            index_topk=128,
            index_n_heads=4,
            index_head_dim=16,
            indexer_types=["full", "shared", "full"],
            hc_mult=3,
            hc_magnitude=1.7,
            hc_eps=1e-6,
            swiglu_limit=0.6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        ("head_dim",),
    ),
    # DeepSeek-V4: a sliding, a CSA and an HCA layer (window 8; compressed keys every 4 tokens over two overlapping
    # series, every 8 tokens; index_topk 32: the context capped at 128), one KV head of 40 that is key and value, RoPE
    # on its trailing 8 channels (the compressed layers' "compress" rope YaRN-scaled, attention_factor 1), q-LoRA 24,
    # the output in 2 groups of rank 12, a sink per head; layer 0 hash-routed (tid2eid drawn in `finish`), then the
    # top 2 of 8 on sqrt(softplus) + selection bias, x2.5, routed and shared SwiGLU clipped at 0.6; 3
    # hyper-connection copies with Sinkhorn comb (maps drawn)
    "deepseek_v4": (
        dict(
            num_key_value_heads=1,
            head_dim=40,
            partial_rotary_factor=0.2,
            q_lora_rank=24,
            o_groups=2,
            o_lora_rank=12,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
            index_topk=32,
            index_n_heads=2,
            index_head_dim=16,
            mlp_layer_types=["hash_moe", "moe", "moe"],
            sliding_window=8,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            routed_scaling_factor=2.5,
            swiglu_limit=0.6,
            hc_mult=3,
            hc_sinkhorn_iters=20,
            rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
                "beta_fast": 32,
                "beta_slow": 1,
            },
        ),
        (),
    ),
    # MiMo-V2-Flash: full / sliding / sliding / full layers (window 8); sliding ones with 2 kv heads and
    # sinks, full ones 1 kv head; heads of 24 with values of 16 (x0.707), RoPE on 8 of 24 channels at a
    # theta per layer type; layer 0 dense, then the top 2 of 8 experts within the best of 2 groups
    "mimo_v2_flash": (
        dict(
            num_hidden_layers=4,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            sliding_window=8,
            num_key_value_heads=1,
            head_dim=24,
            v_head_dim=16,
            attention_value_scale=0.707,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            moe_intermediate_size=32,
            intermediate_size=96,
            norm_topk_prob=True,
            rms_norm_eps=1e-5,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.334},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.334},
            },
        ),
        (),
    ),
    # Laguna (transformers 5.25): full / sliding / sliding / full layers (window 8) with 4, 2, 6, 4 query
    # heads over 2 kv heads, the attention output times softplus(g_proj) per head, RoPE on half of each
    # head at theta 500000 on full layers and on all of it at 10000 on sliding ones; layer 0 dense (96
    # wide), then the top 2 of 8 experts on sigmoid(tanh(logits)) + selection bias, renormalized,
    # x2, beside a 32-wide shared expert
    "laguna": (
        dict(
            num_hidden_layers=4,
            layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            sliding_window=8,
            num_attention_heads_per_layer=[4, 2, 6, 4],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            shared_expert_intermediate_size=32,
            moe_routed_scaling_factor=2.0,
            moe_router_logit_softcapping=1.0,
            rms_norm_eps=1e-6,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        ),
        (),
    ),
    # Mellum (transformers 5.25): Qwen3-MoE's layers; sliding / full / sliding layers (window 8), RoPE at
    # theta 10000 on sliding layers and 500000 on the full one; layer 1 dense (mlp_layer_types, 96 wide), the
    # top 2 of 8 experts renormalized
    "mellum": (
        dict(
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            sliding_window=8,
            mlp_layer_types=["sparse", "dense", "sparse"],
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            norm_topk_prob=True,
            rms_norm_eps=1e-6,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        ),
        (),
    ),
    # Flint (transformers 5.25): sliding / full / sliding / full layers (window 8), RoPE on the sliding ones
    # only, a sink logit per head; layer 0 dense (mlp_only_layers, 96 wide), then the top 2 of 8 experts on
    # sigmoid(logits), renormalized, beside a 32-wide shared expert summed without a gate
    "flint": (
        dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            sliding_window=8,
            mlp_only_layers=[0],
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            intermediate_size=96,
            shared_expert_intermediate_size=32,
            norm_topk_prob=True,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        (),
    ),
    # ZAYA1 (transformers 5.25): compressed convolutional attention on every layer (q|k through a
    # depthwise kernel 2 and a grouped kernel 3 conv: a 3-step conv state, 96 channels; a value half
    # delayed by a token), layer 1 sliding (window 8), RoPE on half of each head per layer type; the top
    # 1 of 6 experts or the skip class under an MLP router over a 24-wide stream carried across layers
    "zaya": (
        dict(
            num_experts=6,
            num_experts_per_tok=1,
            moe_intermediate_size=32,
            router_hidden_size=24,
            layer_types=["hybrid", "hybrid_sliding", "hybrid"],
            sliding_window=8,
            cca_time0=2,
            cca_time1=3,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
        ),
        (),
    ),
    # Beam-1.0 (transformers 5.25): sliding / full / sliding / full layers (window 8), RoPE on the sliding ones,
    # the full ones NoPE with their position query scale; the output gate's per-head bias; layer 0 dense (80
    # wide), then the top 2 of 8 experts within the best of 2 groups on sigmoid + selection bias, renormalized,
    # x2.5 after the sum; logits soft-capped at 4 (the tiny model's reach about that)
    "beam": (
        dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            sliding_window=8,
            num_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            moe_intermediate_size=32,  # QMoE's int4 blocks: the experts' inner width a multiple of 32
            intermediate_size=80,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            final_logit_softcapping=4.0,
            rms_norm_eps=1e-6,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": None,
            },
        ),
        (),
    ),
    # Ergo (transformers 5.25): sliding / full / sliding / full layers (window 8), interleaved RoPE on the sliding
    # ones, the full ones NoPE; a fused qkv_proj; layer 0 a dense squared-ReLU MLP (80 wide), then the top 2 of 8
    # ungated squared-ReLU experts on sigmoid + selection bias, renormalized, x2.5, each expert's output through
    # its own RMSNorm, beside a 48-wide shared expert with its own norm; learned residual gates (drawn, finish)
    "ergo": (
        dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            sliding_window=8,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_dense_intermediate_size=80,
            shared_intermediate_size=48,
            moe_routed_scaling_factor=2.5,
            rms_norm_eps=1e-6,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": None,
            },
        ),
        ("head_dim",),
    ),
    # Inkling (transformers 5.25): sliding / full / sliding / full layers (window 8; the sliding ones 6 query heads
    # of 8 over 3 kv heads, the full ones 4 of 16 over 2), no RoPE, a relative position bias (d_rel 3, the full
    # layers' extent 12: the prompts reach past both extents), the full layers' queries and bias log-scaled from
    # position 4 on; residual convolutions of kernel 4; layer 0 a dense SwiGLU MLP (80 wide), then the top 2 of 8
    # experts on sigmoid + selection bias weighted beside 2 shared experts, x2.5; logits over 2 (drawn, finish)
    "inkling_text": (
        dict(
            num_hidden_layers=4,
            local_layer_ids=[0, 2],
            swa_num_attention_heads=6,
            swa_num_key_value_heads=3,
            swa_head_dim=8,
            sliding_window_size=8,
            d_rel=3,
            rel_extent=12,
            log_scaling_n_floor=4,
            log_scaling_alpha=0.3,
            conv_kernel_size=4,
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            intermediate_size=80,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=2,
            route_scale=2.5,
            logits_mup_width_multiplier=2.0,
            rms_norm_eps=1e-6,
            initializer_range=0.15,
        ),
        (),
    ),
    # Inkling2 (transformers 5.25): Inkling's tiny layers (sliding / full / sliding / full, the sliding ones 6 heads of
    # 8 over 3, the full ones 4 of 16 over 2, window 8, d_rel 3, full extent 12, log scaling from position 4) with
    # blocks of 2 layers for the block attention residuals, clip thresholds the drawn heads reach, experts soft-capped
    # at 1 (gate) and 1.5 (up), the top 2 of 8 on every layer, logits capped at 3, the head 380 of 384 rows (finish)
    "inkling2_text": (
        dict(
            num_hidden_layers=4,
            layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
            swa_num_attention_heads=6,
            swa_num_key_value_heads=3,
            swa_head_dim=8,
            sliding_window_size=8,
            d_rel=3,
            rel_extent=12,
            log_scaling_n_floor=4,
            log_scaling_alpha=0.3,
            qk_l2_clip_threshold=3.0,
            rel_l2_clip_threshold=1.0,
            n_layers_per_attn_res_block=2,
            mlp_gate_softcap=1.0,
            mlp_up_softcap=1.5,
            final_logit_softcapping=3.0,
            conv_kernel_size=4,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            route_scale=2.5,
            unpadded_vocab_size=380,
            rms_norm_eps=1e-6,
            initializer_range=0.15,
        ),
        (),
    ),
    # Inkling2-Loop (transformers 5.25): Inkling2's tiny layers, eight of them (sliding / full alternating), layers 2
    # to 5 (two blocks, so a later pass's messages read a block state beside the previous pass's output) run 3 times,
    # the message gates of rank 5, eps 1e-5 (the gates' norms read the config's, the block attentions' a fixed 1e-6);
    # weights at std 0.08: at Inkling2's 0.15 the 16 graph layers amplify fp32 rounding so that HF's own cached and
    # uncached logits part by 2e-4, past the registry's 1e-4
    "inkling2_loop_text": (
        dict(
            num_hidden_layers=8,
            layer_types=["hybrid_sliding", "hybrid"] * 4,
            swa_num_attention_heads=6,
            swa_num_key_value_heads=3,
            swa_head_dim=8,
            sliding_window_size=8,
            d_rel=3,
            rel_extent=12,
            log_scaling_n_floor=4,
            log_scaling_alpha=0.3,
            qk_l2_clip_threshold=3.0,
            rel_l2_clip_threshold=1.0,
            n_layers_per_attn_res_block=2,
            mlp_gate_softcap=1.0,
            mlp_up_softcap=1.5,
            final_logit_softcapping=3.0,
            conv_kernel_size=4,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            route_scale=2.5,
            unpadded_vocab_size=380,
            rms_norm_eps=1e-5,
            initializer_range=0.08,
            loop_layer_index_start=2,
            loop_layer_index_end=6,
            loop_num_passes=3,
            loop_gate_rank=5,
        ),
        (),
    ),
}
FAMILIES = list(CONFIGS)
# Cohere2-MoE's other forms: RMSNorms, the shared expert summed, two dense layers whose window pattern
# is 2 (sliding, then a global layer without RoPE: no force_rope), then sliding / global sparse layers
COHERE2_MOE_RMS = dict(
    rms_norm_eps=1e-5,
    shared_expert_combination_strategy="sum",
    first_k_dense_replace=2,
    prefix_dense_sliding_window_pattern=2,
)
# and its sigmoid selection: the top 2 weighted by their sigmoid, renormalized (norm_topk_prob)
COHERE2_MOE_SIGMOID = dict(expert_selection_fn="sigmoid", norm_topk_prob=True)


def finish(model: Any, model_type: str, g: torch.Generator) -> None:
    """JetMoE: the pad id's embedding row drawn like the others. transformers zeroes it (padding_idx),
    and a zero hidden state ties every attention expert's router logit exactly: the top k of equal
    values is implementation-defined in torch (indices 2, 3 of 4 here) and the lowest indices in ORT's
    TopK, and with zero queries each expert's output projection still reads the values, so the tie
    decides the output. Trained checkpoints have no zero rows; the tiny model's pad id 5 is generated.
    LongCat-Flash: its sublayer norms (`input_layernorm.0`, moe_models skips modules named by an
    index) drawn as the others, and its routers (`_longcat_routers`)."""
    if model_type == "longcat_flash":
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ("layernorm.0." in name or "layernorm.1." in name) and name.endswith("weight"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3 + 1.0)
        _longcat_routers(model, g)
    if model_type in ("hy_v4", "deepseek_v4"):
        _hyper_connections(model, g, 0.5 if model_type == "hy_v4" else 0.2)
    if model_type == "deepseek_v4":
        _hash_table(model, g)
    if model_type == "zaya":
        _zaya(model, g)
    if model_type == "ergo":  # the residual gates (zeros at init: a = 1/2 on every channel) drawn per channel
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "residual_gate" in name:
                    p.copy_(torch.randn(p.shape, generator=g))
    if model_type in ("inkling_text", "inkling2_text", "inkling2_loop_text"):
        _inkling(model, g)
    if model_type == "jetmoe":
        with torch.no_grad():
            table = model.get_input_embeddings().weight
            pad = model.config.pad_token_id
            table[pad] = torch.randn(table.shape[1], generator=g) * float(table.std())


def _hyper_connections(model: Any, g: torch.Generator, spread: float = 0.5) -> None:
    """HunYuan-V4's and DeepSeek-V4's stream maps: HF's init (scale 0.01) leaves pre / post at sigmoid(base) for every
    token, so the maps (std `spread`), their scales and biases are drawn so that the weights vary by token and copy
    (gates spread over (0, 1); DeepSeek-V4's wider map, (2 + K) K rows, at 0.2: at 0.5 some tokens' pre weights all
    fall below 1e-6, where the block norm's eps decides its output)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("fn", "hc_fn"):
                p.copy_(torch.randn(p.shape, generator=g) * spread)
            elif leaf in ("scale", "hc_scale") and "hc" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif leaf in ("base", "hc_base"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def _hash_table(model: Any, g: torch.Generator) -> None:
    """DeepSeek-V4's token id -> experts tables (zeros at init: every token on expert 0 twice): k distinct experts
    per id, drawn."""
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("tid2eid"):
                rows = [torch.randperm(model.config.n_routed_experts, generator=g)[: buffer.shape[1]] for _ in buffer]
                buffer.copy_(torch.stack(rows))


def _longcat_routers(model: Any, g: torch.Generator) -> None:
    """LongCat-Flash's routers read `router.classifier.weight` through F.linear (the classifier module
    never runs, so moe_models' router randomization and decorrelation miss it): each drawn like the
    other routers (std 0.5), its input's mean direction removed layer by layer, and the selection
    bias drawn at std 0.05, the size of the softmax probabilities' spread it shifts (at moe_models'
    0.2 the bias alone would choose)."""
    ids = torch.randint(6, model.config.vocab_size, (2, 32), generator=g)
    for layer in model.model.layers:
        router = layer.mlp.router
        cap: dict = {}
        hook = router.register_forward_pre_hook(lambda _m, args, cap=cap: cap.setdefault("x", args[0].detach()))
        with torch.no_grad():
            weight = router.classifier.weight
            weight.copy_(torch.randn(weight.shape, generator=g) * 0.5)
            model(ids)
            hook.remove()
            mean = cap["x"].reshape(-1, cap["x"].shape[-1]).float().mean(0)
            u = mean / mean.norm()
            weight.copy_(weight - (weight @ u)[:, None] * u[None])
            bias = router.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=g) * 0.05)


def _zaya(model: Any, g: torch.Generator) -> None:
    """ZAYA1's parameters HF initializes to constants, drawn so each mechanism matters: the keys'
    temperature (zeros: every score 0), the affine residual maps' and the router stream's scales
    (ones), the real experts' balancing biases around -1 (transformers sets the skip class's to -1
    on load, whatever is stored: the skip expert competes only against biases near it), so some
    tokens choose it; the router's output drawn wide, without its input's mean direction (the GELU
    MLP's output has a large token-independent part that would pick one expert for every token)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("qk_norm.temp"):
                p.copy_(torch.rand(p.shape, generator=g) * 1.5 + 1.0)
            elif name.endswith("_scale"):  # hidden_states / residual / input / router_states scales
                p.copy_(torch.rand(p.shape, generator=g) * 0.8 + 0.6)
            elif name.endswith(("hidden_states_bias", "residual_bias")):  # small: a shared offset makes one argmax
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            elif name.endswith("router_mlp.out_proj.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 3.0)
        for layer in model.model.layers:
            biases = layer.mlp.gate.balancing_biases
            biases.copy_(torch.randn(biases.shape, generator=g) * 0.005 - 1.0)
            biases[-1] = -1.0
    ids = torch.randint(6, model.config.vocab_size, (2, 32), generator=g)
    for layer in model.model.layers:  # each router's output weight without its input's mean direction
        out_proj, cap = layer.mlp.gate.router_mlp.out_proj, {}
        hook = out_proj.register_forward_pre_hook(lambda _m, args, cap=cap: cap.setdefault("x", args[0]))
        with torch.no_grad():
            model(ids)
        hook.remove()
        mean = cap["x"].reshape(-1, cap["x"].shape[-1]).mean(0)
        u = mean / mean.norm()
        with torch.no_grad():
            out_proj.weight.sub_(torch.outer(out_proj.weight @ u, u))


def _inkling(model: Any, g: torch.Generator) -> None:
    """Inkling's parameters HF initializes small or constant, drawn so each mechanism moves the logits: the
    relative banks (std 0.1 at init: a bias of ~0.1) at std 1, the residual convolutions' kernels at std 0.5,
    the dense MLPs' and routers' learned scalars (ones) in [0.5, 1.5)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("rel_logits_proj.proj", "relative_position_bias.proj")):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith(("conv1d.weight", "sconv.static_weight")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith("global_scale") or name.endswith("norm.scale"):  # Inkling2's clip scales (ones)
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith("input.query"):  # Inkling2's block-attention queries (zeros: uniform weights)
                p.copy_(torch.randn(p.shape, generator=g))
