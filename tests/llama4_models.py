"""Tiny random Llama-4 checkpoints (`Llama4ForCausalLM`, and the text decoder of
`Llama4ForConditionalGeneration`), with the tiny tokenizer.

Four layers cover every kind of layer the family has: RoPE layers attend within chunks of 6
positions (shorter than the registry's 7-, 14- and 30-token prompts, so the chunk boundary falls
inside them), layer 3 is a NoPE global layer with attention temperature tuning (floor_scale 4, so
the query scale changes every 4 positions of a test prompt), the RoPE layers L2-normalize q and k
after their interleaved-pair RoPE (llama3 scaling), and layers 1 and 3 are experts (top-1 sigmoid
router scaling the expert input, a shared expert) while 0 and 2 are dense MLPs of their own width.

    from llama4_models import save_llama4
    p = save_llama4(folder)                                # Llama4ForCausalLM
    p = save_llama4(folder, conditional=True)              # Llama4ForConditionalGeneration
    p = save_llama4(folder, num_experts_per_tok=2)         # text config overrides
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiny_models import randomize_norms, save_tokenizer

TEXT: dict[str, Any] = dict(
    vocab_size=384,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_hidden_layers=4,
    intermediate_size=32,  # the experts' and the shared expert's width
    intermediate_size_mlp=96,  # the dense layers' MLP
    num_local_experts=4,
    num_experts_per_tok=1,
    interleave_moe_layer_step=2,  # experts on layers 1 and 3
    no_rope_layer_interval=4,  # layer 3 is NoPE (global), 0-2 RoPE (chunked)
    attention_chunk_size=6,
    attn_temperature_tuning=True,
    floor_scale=4,
    attn_scale=0.5,
    use_qk_norm=True,
    rms_norm_eps=1e-5,
    max_position_embeddings=256,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=5,
    initializer_range=0.1,
    tie_word_embeddings=False,
)
VISION: dict[str, Any] = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14,
    vision_output_dim=16, projector_input_dim=16, projector_output_dim=16, pixel_shuffle_ratio=0.5,
)  # fmt: skip


def llama4_config(conditional: bool = False, **overrides: Any) -> Any:
    import transformers as tf

    text = {**TEXT, **overrides}
    if not conditional:
        return tf.Llama4TextConfig(**text)
    config = tf.Llama4Config(
        text_config=text, vision_config=VISION, image_token_index=300, boi_token_index=301, eoi_token_index=302,
        tie_word_embeddings=text["tie_word_embeddings"],
    )  # fmt: skip
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, key, text[key])
    return config


def save_llama4(out_dir: Path, conditional: bool = False, seed: int = 0, **overrides: Any) -> Path:
    """A tiny random Llama-4 checkpoint and the tiny tokenizer in `out_dir`."""
    import torch
    import transformers as tf

    out_dir = Path(out_dir)
    config = llama4_config(conditional, **overrides)
    torch.manual_seed(seed)
    cls = tf.Llama4ForConditionalGeneration if conditional else tf.Llama4ForCausalLM
    model = cls(config).eval()
    randomize_norms(model)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir)
    save_tokenizer(out_dir, vocab_size=config.get_text_config().vocab_size)
    return out_dir
