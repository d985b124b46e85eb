"""Tiny configs of the classic decoders (GPT-2, GPT-NeoX / Pythia, OPT, GPT-J) for
tests/dense_models.py, which builds, randomizes and saves them like the other dense families.

They spell their sizes their own way (n_embd, n_head, ffn_dim, ...) and have no kv-head key, so
they do not start from dense_models.COMMON; the shapes are the same where they can be: vocab 384,
3 layers, bos 0 / eos 1 / pad 5, 256 positions, weights N(0, 0.1). GPT-NeoX and GPT-J use head_dim
32 with 16 rotary channels (partial 0.5, rotary_dim 16), which GQA's fused RoPE takes as their real
checkpoints' do (Pythia: 0.25 of 64 / 128; GPT-J-6B: 64 of 256).
"""

from __future__ import annotations

CLASSIC_FAMILIES = (
    "gpt2", "gpt_neox", "opt", "gptj", "gpt_bigcode", "persimmon", "biogpt", "gpt_neo", "xglm", "gpt_neox_japanese",
    "ctrl", "openai-gpt", "modernbert-decoder",
)  # fmt: skip
_IDS = dict(vocab_size=384, bos_token_id=0, eos_token_id=1, pad_token_id=5)


def classic_config(model_type: str) -> dict:
    if model_type == "gpt2":  # Conv1D weights, learned positions, gelu_new, tied
        return dict(
            _IDS, n_embd=64, n_head=4, n_layer=3, n_inner=96, n_positions=256, activation_function="gelu_new",
            layer_norm_epsilon=1e-5, initializer_range=0.3, tie_word_embeddings=True,
        )  # fmt: skip
    if model_type == "gpt_neox":  # qkv per head, parallel residual with two norms, partial RoPE, exact gelu
        return dict(
            _IDS, hidden_size=128, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
            max_position_embeddings=256, hidden_act="gelu", layer_norm_eps=1e-5, use_parallel_residual=True,
            attention_bias=True, initializer_range=0.1, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )  # fmt: skip
    if model_type == "opt":  # learned positions (offset 2), ReLU, pre-norm, tied
        return dict(
            _IDS, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, ffn_dim=96, word_embed_proj_dim=64,
            max_position_embeddings=256, activation_function="relu", do_layer_norm_before=True, init_std=0.3,
            tie_word_embeddings=True,
        )  # fmt: skip
    if model_type == "gptj":  # parallel block off ln_1, partial interleaved RoPE, lm_head bias
        return dict(
            _IDS, n_embd=128, n_head=4, n_layer=3, n_inner=96, n_positions=256, rotary_dim=16,
            activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.1, tie_word_embeddings=False,
        )  # fmt: skip
    if model_type == "gpt_bigcode":  # SantaCoder's multi-query c_attn, learned positions, tanh GELU, tied
        return dict(
            _IDS, n_embd=64, n_head=4, n_layer=3, n_inner=96, n_positions=256, multi_query=True,
            activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5, initializer_range=0.3,
            tie_word_embeddings=True,
        )  # fmt: skip
    if model_type == "persimmon":  # per-head fused qkv, q/k LayerNorms, partial RoPE 0.5, relu^2, untied
        return dict(
            _IDS, hidden_size=128, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
            max_position_embeddings=256, hidden_act="relu2", layer_norm_eps=1e-5, qk_layernorm=True,
            initializer_range=0.1, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 25000.0, "partial_rotary_factor": 0.5},
        )  # fmt: skip
    if model_type == "biogpt":  # OPT's positions (offset 2), scaled embeddings, gelu, output_projection
        return dict(
            _IDS, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
            max_position_embeddings=256, hidden_act="gelu", scale_embedding=True, initializer_range=0.1,
            tie_word_embeddings=False,
        )  # fmt: skip
    if model_type == "gpt_neo":  # unscaled scores, a global layer then two local ones (window 8), gelu_new
        return dict(
            _IDS, hidden_size=64, num_heads=4, num_layers=3, intermediate_size=96, max_position_embeddings=256,
            attention_types=[[["global", "local", "local"], 1]], window_size=8, activation_function="gelu_new",
            layer_norm_epsilon=1e-5, initializer_range=0.1, tie_word_embeddings=True,
        )  # fmt: skip
    if model_type == "xglm":  # sinusoidal positions (offset 2; the pad id row zero), scaled embeddings, tied
        # (init_std 0.3: at 0.1 the tied model repeats one id)
        return dict(
            _IDS, d_model=64, attention_heads=4, num_layers=3, ffn_dim=96, max_position_embeddings=256,
            activation_function="gelu", scale_embedding=True, init_std=0.3, tie_word_embeddings=True,
        )  # fmt: skip
    if model_type == "gpt_neox_japanese":  # GPT-NeoX's qkv per head in sequential layers, MLP 2 x hidden, tied
        return dict(
            _IDS, hidden_size=128, num_attention_heads=4, num_hidden_layers=3, intermediate_multiple_size=2,
            max_position_embeddings=256, hidden_act="gelu", layer_norm_eps=1e-5, initializer_range=0.1,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )  # fmt: skip
    # sinusoidal positions, sqrt(64)-scaled embeddings, ReLU, an lm_head bias; untied: tied, the random model
    # repeats one id at init 0.1 and 0.3 (at 0.6 its logits reach 20 and ORT's 1e-4 off)
    if model_type == "ctrl":
        return dict(
            _IDS, n_embd=64, n_head=4, n_layer=3, dff=96, n_positions=256, layer_norm_epsilon=1e-6,
            initializer_range=0.1, tie_word_embeddings=False,
        )  # fmt: skip
    # post-LN layers, learned positions, Conv1D, tanh GELU (afn "gelu"); untied: tied, its normed last hidden
    # state points back at the current token's row and every continuation repeats it (init 0.1 to 1.0)
    if model_type == "openai-gpt":
        return dict(
            _IDS, n_embd=64, n_head=4, n_layer=3, n_positions=256, afn="gelu", layer_norm_epsilon=1e-5,
            initializer_range=0.1, tie_word_embeddings=False,
        )  # fmt: skip
    # layer 0 full (RoPE base 160000) without its attention norm, 1-2 sliding (window 16 // 2, base 10000),
    # LayerNorms without bias, the prediction head (exact GELU, LayerNorm) before the tied decoder with its bias
    if model_type == "modernbert-decoder":
        return dict(
            _IDS, hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
            max_position_embeddings=256, hidden_activation="gelu", local_attention=16, norm_eps=1e-5,
            cls_token_id=0, sep_token_id=1, initializer_range=0.1, tie_word_embeddings=True,
        )  # fmt: skip
    raise ValueError(model_type)
