"""Tiny configs of the Llama-shaped families and their mixtures of experts (issue #24), on
tests/dense_models.py's common shape; dense_models.family_config reads them from here (the classic
decoders are tests/classic_models.py).

Each config makes its mechanism matter: Seed-OSS's head_dim (32) is not hidden / heads (16);
Arcee runs YaRN with an original length (32) shorter than the long prompts.
"""

from __future__ import annotations

from typing import Any

# model_type -> config kwargs applied over dense_models.COMMON
CONFIGS: dict[str, dict[str, Any]] = {
    "seed_oss": dict(
        head_dim=32,  # decoupled: 4 heads x 32 = 128 != hidden 64
        attention_bias=True,
        attention_out_bias=False,
        residual_dropout=0.1,  # training only
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "arcee": dict(
        head_dim=16,
        hidden_act="relu2",
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 8.0,  # max_position_embeddings 256 / 32
            "original_max_position_embeddings": 32,
        },
    ),
    # 12 experts in 3 groups of 4: the choice keeps the 2 best groups (each ranked by its two best
    # biased scores), then the top 3; dense first layer, 1 shared expert, partial RoPE, q/k norms
    "glm4_moe": dict(
        head_dim=16,
        attention_bias=True,
        use_qk_norm=True,
        first_k_dense_replace=1,
        n_routed_experts=12,
        num_experts_per_tok=3,
        n_group=3,
        topk_group=2,
        moe_intermediate_size=32,
        n_shared_experts=1,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        initializer_range=0.2,  # at 0.1 short prompts settle on one repeated id
    ),
    # dots.llm1: Qwen3 attention with layers 1-2 sliding (window 8, from max_window_layers 1) and
    # GLM-4-MoE's routing: 12 experts in 3 groups, the 2 best groups kept, top 3; 2 shared experts
    "dots1": dict(
        head_dim=16,
        sliding_window=8,
        max_window_layers=1,
        first_k_dense_replace=1,
        n_routed_experts=12,
        num_experts_per_tok=3,
        n_group=3,
        topk_group=2,
        moe_intermediate_size=32,
        n_shared_experts=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.2,
    ),
    # 4 layers, experts on 1 and 2 only (start 1, end 2, interval 1): dense MLPs before and after;
    # the top 2 of 6 chosen on softmax probs + bias, 1 shared expert, GPT-J RoPE, tied
    "ernie4_5_moe": dict(
        head_dim=16,
        num_hidden_layers=4,
        use_bias=False,
        moe_num_experts=6,
        moe_k=2,
        moe_intermediate_size=32,
        moe_num_shared_experts=1,
        moe_layer_start_index=1,
        moe_layer_end_index=2,
        moe_layer_interval=1,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        initializer_range=0.2,  # at 0.1 the tied model copies its last token
    ),
    # experts on every layer (top 2 of 6, renormalized) beside the shared MLP, both intermediate_size
    # wide; q/k norms after NTK-alpha RoPE; moe_topk spelled per layer as Hunyuan-A13B does
    "hunyuan_v1_moe": dict(
        head_dim=16,
        num_experts=6,
        moe_topk=[2, 2, 2],
        intermediate_size=32,
        attention_bias=False,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
    ),
    # issue #39 item 3, dense families read from their modeling code (gqa_export/arch/derived_families.py).
    # EXAONE-3.x: LlamaForCausalLM under its own model_type, the hub's key spellings (num_layers,
    # layer_norm_epsilon, activation_function) and GPT-2-style tensor names (transformer.h.{i}.attn.attention.*)
    "exaone": dict(
        num_layers=3,
        layer_norm_epsilon=1e-5,
        activation_function="silu",
        head_dim=16,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 1000000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    # InternLM3: LlamaForCausalLM, qkv_bias / bias spellings (one setting for q/k/v/o and the MLP), head_dim 32
    "internlm3": dict(
        head_dim=32,
        qkv_bias=True,
        bias=True,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 50000000.0, "factor": 6.0},
    ),
    # Helium: Llama with GPT-J (interleaved) RoPE pairs, no o_proj bias
    "helium": dict(
        head_dim=16,
        rms_norm_eps=1e-8,
        attention_bias=True,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    ),
    # VaultGemma: Gemma-2 without the post-attention / post-feedforward norms; softcaps, windows 3:1
    "vaultgemma": dict(
        head_dim=16,
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=24,
        attn_logit_softcapping=20.0,
        final_logit_softcapping=10.0,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # Ministral (8B): Mistral/Qwen2 layers without q/k/v biases, windows per layer from layer_types
    "ministral": dict(
        head_dim=16,
        sliding_window=8,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 100000000.0},
    ),
    # GLM (glm-4-9b, model_type glm): pre-norm Llama layers, Phi-3's fused gate_up, partial GPT-J RoPE, qkv bias
    "glm": dict(
        head_dim=16,
        attention_bias=True,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    ),
    # CWM: Llama with llama3 RoPE and a full layer every 4th (window 8 elsewhere)
    "cwm": dict(
        head_dim=16,
        num_hidden_layers=4,
        sliding_window=8,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 1000000.0,
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    # Solar-Open: Llama attention (full rotate-half RoPE, no q/k norms) with GLM-4-MoE's routing on
    # every layer: 12 experts in 3 groups, the 2 best kept, top 3, 1 shared expert
    "solar_open": dict(
        head_dim=16,
        n_routed_experts=12,
        num_experts_per_tok=3,
        n_group=3,
        topk_group=2,
        moe_intermediate_size=32,
        n_shared_experts=1,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.15,  # 0.2 and 0.25: one quantized smoke run ends at EOS, the other not
    ),
    # NanoChat: weightless RMSNorms (the final one on the embeddings too), scaleless q/k norms after a
    # reversed RoPE, squared-ReLU fc1 / fc2, a final logit softcap of 4 (the logits reach ~3)
    "nanochat": dict(
        head_dim=16,
        hidden_act="relu2",
        rms_norm_eps=1e-6,
        final_logit_softcapping=4.0,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # BitNet b1.58's float checkpoint: Llama layers, relu2 gated MLP, RMSNorms before o_proj and down_proj
    # (their weights drawn away from 1 by dense_models' randomization); 2 kv heads of 4
    "bitnet": dict(
        hidden_act="relu2",
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    ),
    # IQuest-Coder: LlamaForCausalLM under its own model_type, head_dim 32 (decoupled from hidden / heads)
    "iquestcoder": dict(
        head_dim=32,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    ),
    # Jais-2: Nemotron's relu2 plain MLP and biases in Llama layers with plain LayerNorms (weights drawn
    # around 1 by dense_models' randomization: read as Nemotron's 1 + w they would be off by one)
    "jais2": dict(
        head_dim=16,
        hidden_act="relu2",
        layer_norm_eps=1e-5,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # GraniteSWA: Granite's multipliers, sinks on every layer (drawn by dense_models' randomization),
    # layer 0 full, 1-2 sliding (window 8), a RoPE base per layer: the global one, none (NoPE), another
    "granite_swa": dict(
        sliding_window=8,
        layer_rope_theta=[10000.0, 0, 500000.0],
        embedding_multiplier=6.0,
        attention_multiplier=0.125,
        residual_multiplier=0.5,
        logits_scaling=2.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # HyperCLOVAX: Granite's multipliers, each block's output RMSNormed before the add (use_post_norm),
    # the logits multiplied by logits_scaling (2.5: Granite would divide), head_dim 16
    "hyperclovax": dict(
        embedding_multiplier=6.0,
        attention_multiplier=0.125,
        residual_multiplier=0.5,
        logits_scaling=2.5,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # DiffLlama: differential attention over 4 heads of 16 (2 head pairs), 2 kv heads (one per value half),
    # lambdas drawn by dense_models' randomization; caches 32 wide
    "diffllama": dict(
        head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # Doge: dynamic mask attention (A and dt_proj drawn by dense_models' randomization), q/k norms, residual
    # vectors; keep_window_size 96 (the package's context, past every prompt and its tokens), windows of 8
    "doge": dict(
        head_dim=16,
        sliding_window=8,
        keep_window_size=96,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # HRM-Text: 2 layers per stack run H_cycles 2 x (L_cycles 2 + 1) times (12 graph layers, 12 KV caches), MHA
    # (the config has no num_key_value_heads) with a per-channel sigmoid output gate, weightless RMSNorms,
    # embeddings x 7.5 (embedding_scale), z_L_init drawn by dense_models' randomization (zeros at init);
    # prefix_lm on, as published: without token_type_ids the model is causal
    "hrm_text": dict(
        num_hidden_layers=2,
        H_cycles=2,
        L_cycles=2,
        head_dim=16,
        embedding_scale=7.5,
        prefix_lm=True,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # Dory: 4 stored layers, 1 input, 2 recurrent run 3 times (the stream reset to l2(h) + l2(h_in) before each
    # pass), 1 output: 8 graph layers and KV caches in HF's "per_loop" order; sliding (window 8) and full layers
    # with their own RoPE thetas, both in the loop; nGPT scale vectors drawn by dense_models' randomization.
    # save_pretrained writes layer_types with an "mlp" entry after each layer and the counts doubled, as the
    # released config.json does
    "dory": dict(
        num_hidden_layers=4,
        n_input_layers=1,
        n_recurrent_layers=2,
        n_output_layers=1,
        n_recurrent_loops=3,
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "full_attention"],
        ngpt_alpha_init=0.05,
        tie_word_embeddings=False,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
    ),
    # MiniCPM3: multi-head latent attention (q-LoRA 32, a 32-wide latent, keys of 16 no-rope + 8 rope dims,
    # values of 16 padded to 24 in the cache; one kv head per query head, as HF expands) with rotate-half
    # RoPE under the published longrope (short factors: the original length is the whole context), and
    # the three scales: embeddings x 12, residual branches x 1.4 / sqrt(3), logits / (64 / 20)
    "minicpm3": dict(
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        scale_emb=12,
        scale_depth=1.4,
        dim_model_base=20,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,  # tied, the random model repeats its last token
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0, 1.2, 1.5, 2.0],
            "long_factor": [1.0, 2.0, 4.0, 8.0],
            "original_max_position_embeddings": 256,
        },
    ),
    # Youtu-LLM: DeepSeek-V3's latent attention (q-LoRA 32, latent 32, keys 16 no-rope + 8 rope dims in
    # pairs, values 16 padded to 24, YaRN with mscale_all_dim) in dense Llama layers; untied (tied as
    # released, the random model repeats one id: the tied table is DeepSeek's and MiniCPM3's code path)
    "youtu": dict(
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        },
    ),
}
FAMILIES = list(CONFIGS)
