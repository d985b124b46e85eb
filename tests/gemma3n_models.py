"""Tiny random Gemma-3n checkpoints in the two forms transformers 5.x writes.

- "causal": Gemma3nForCausalLM (gemma3n_text), decoder under `model.`;
- "conditional": Gemma3nForConditionalGeneration (gemma3n), decoder under `model.language_model.`,
  with a tiny audio tower and the vision/audio hard-token embedders.

Every text feature is on: 6 layers S F S F S F, window 4 (shorter than the prompts), the last 2
KV-shared (4 reads 2, 5 reads 3), 3 AltUp streams (active 0), LAuReL rank 4, per-layer MLP widths
96 / 128, gaussian top-k sparsity on layers 0, 2 and 5, per-layer embeddings (P = 8), final
softcap 2, tied embeddings. The AltUp router and coefficients are drawn large enough that the
predict / correct steps move the logits. In the conditional form ids 352..367 are vision and
368..383 audio control tokens (embedded by their own embedders; the per-layer table has 352 rows).

Gemma-3n's vision tower is a timm model; without timm installed (this venv) it is replaced by an
empty module while the checkpoint is made and loaded: the text decoder never reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiny_models import save_tokenizer

LAYER_TYPES = ["sliding_attention", "full_attention"] * 3
CLASSES = {"causal": "Gemma3nForCausalLM", "conditional": "Gemma3nForConditionalGeneration"}


def text_config(**overrides: Any) -> dict[str, Any]:
    text: dict[str, Any] = dict(
        vocab_size=384, hidden_size=64, intermediate_size=[96, 128, 96, 128, 96, 96], num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=4, num_kv_shared_layers=2,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=384, laurel_rank=4, altup_num_inputs=3,
        activation_sparsity_pattern=[0.95, 0.0, 0.9, 0.0, 0.0, 0.8], layer_types=list(LAYER_TYPES),
        final_logit_softcapping=2.0, max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=0,
        eos_token_id=1, pad_token_id=5, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        },
    )  # fmt: skip
    text.update(overrides)
    return text


def stub_vision_tower() -> None:
    """Without timm, build Gemma-3n's vision tower as an empty module (never read by the text path)."""
    import importlib.util

    if importlib.util.find_spec("timm") is not None:
        return
    import torch
    from transformers.models.gemma3n import modeling_gemma3n as m

    if getattr(m.AutoModel, "_text_only_stub", False):
        return
    auto = m.AutoModel

    class _AutoModel:
        _text_only_stub = True

        @staticmethod
        def from_config(config: Any, **kwargs: Any) -> Any:
            if getattr(config, "model_type", "") == "gemma3n_vision":
                return torch.nn.Module()
            return auto.from_config(config, **kwargs)

    m.AutoModel = _AutoModel  # type: ignore[misc]


def _config(form: str, overrides: dict[str, Any]) -> Any:
    import transformers as tf

    if form == "causal":
        return tf.Gemma3nTextConfig(**text_config(**overrides))
    text = text_config(**{"vocab_size_per_layer_input": 352, **overrides})
    vision = tf.Gemma3nVisionConfig(hidden_size=16, vocab_size=16, vocab_offset=352)
    audio = tf.Gemma3nAudioConfig(
        vocab_size=16, vocab_offset=368, input_feat_size=8, hidden_size=16, conf_attention_chunk_size=4,
        conf_attention_context_left=5, conf_num_attention_heads=2, conf_num_hidden_layers=1,
        sscp_conv_channel_size=[4, 4],
    )  # fmt: skip
    return tf.Gemma3nConfig(
        text_config=tf.Gemma3nTextConfig(**text).to_dict(), vision_config=vision.to_dict(),
        audio_config=audio.to_dict(), tie_word_embeddings=True,
        boi_token_id=352, eoi_token_id=353, image_token_id=354, boa_token_id=368, eoa_token_id=369, audio_token_id=370,
    )  # fmt: skip


def save_gemma3n(out_dir: Path, form: str, seed: int = 0, **overrides: Any) -> Path:
    """Save a tiny random Gemma-3n checkpoint of `form` (text-config overrides as keywords) plus the tokenizer."""
    import torch
    import transformers as tf

    stub_vision_tower()
    config = _config(form, dict(overrides))
    torch.manual_seed(seed)
    model = getattr(tf, CLASSES[form])(config)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("altup.modality_router.weight"):  # tanh(router) away from 0: routing matters
                param.copy_(8.0 * torch.randn(param.shape, generator=g))
            elif name.endswith(("prediction_coefs.weight", "correction_coefs.weight")):
                param.copy_(0.3 * torch.randn(param.shape, generator=g))
            elif param.ndim == 1:  # norms (plain weights, near 1) and correct_output_scale (init 0)
                param.copy_(1.0 + 0.3 * torch.randn(param.shape, generator=g))
            elif param.ndim >= 2:
                param.copy_(0.05 * torch.randn(param.shape, generator=g))
    model.tie_weights()
    model = model.eval()
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir)
    save_tokenizer(out_dir, vocab_size=384)
    return out_dir
