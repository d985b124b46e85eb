"""Tiny random Gemma-4 checkpoints in the three forms transformers 5.x writes.

- "causal": Gemma4ForCausalLM (gemma4_text), decoder under `model.`;
- "conditional": Gemma4ForConditionalGeneration (gemma4), decoder under `model.language_model.`,
  with tiny vision and audio towers;
- "unified": Gemma4UnifiedForConditionalGeneration (gemma4_unified; no per-layer embeddings);
- "unified_causal": Gemma4UnifiedForCausalLM (gemma4_unified_text), the text class alone, under `model.`.

Defaults turn every text feature on: 8 layers S S F S S F S F (sliding head_dim 16 with 2 kv heads,
global head_dim 32 with 1 kv head through k = v), the last 4 layers KV-shared (layers 4, 6 read
layer 3; 5, 7 read layer 2) with double-wide MLPs, window 4, proportional partial RoPE on global
layers, per-layer embeddings (P = 8), a final softcap of 2 (small, so that a missing one shows),
tied embeddings. Norm weights and the stored layer scalars are randomized. Placeholder ids:
image 300, video 301, audio 302.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiny_models import save_tokenizer

TOKEN_IDS = {"image_token_id": 300, "video_token_id": 301, "audio_token_id": 302, "boi_token_id": 303,
             "eoi_token_id": 304}  # fmt: skip
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
               "sliding_attention", "full_attention", "sliding_attention", "full_attention"]  # fmt: skip
CLASSES = {
    "causal": "Gemma4ForCausalLM",
    "conditional": "Gemma4ForConditionalGeneration",
    "full": "Gemma4ForConditionalGeneration",
    "unified": "Gemma4UnifiedForConditionalGeneration",
    "unified_causal": "Gemma4UnifiedForCausalLM",
}


# form "full": Gemma4ForConditionalGeneration whose vision tower the full package exports (patch 4,
# 3 x 3 pooling, 2 layers, head_dim 8); the tokenizer holds <|image>, <|image|>, <image|> as ids 6-8
FULL_VISION: dict[str, Any] = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
    head_dim=8, patch_size=4, pooling_kernel_size=3, position_embedding_size=64,
)  # fmt: skip
FULL_PROCESSOR: dict[str, Any] = dict(patch_size=4, max_soft_tokens=70, pooling_kernel_size=3)
FULL_IMAGE_TOKENS = ("<|image>", "<|image|>", "<image|>")
FULL_IMAGE_IDS = {"boi_token_id": 6, "image_token_id": 7, "eoi_token_id": 8}
# form "full" with_audio: a conformer audio tower the full package exports (docs/multimodal.md §16):
# 16 log-mel bins, chunks of 4 frames with 4 past frames, 2 layers; the tokenizer adds <|audio>,
# <|audio|>, <audio|> as ids 9-11
FULL_AUDIO: dict[str, Any] = dict(
    hidden_size=16, num_hidden_layers=2, num_attention_heads=2, subsampling_conv_channels=[16, 4],
    conv_kernel_size=3, attention_chunk_size=4, attention_context_left=5, attention_context_right=0,
    output_proj_dims=16,
)  # fmt: skip
FULL_FEATURES: dict[str, Any] = dict(feature_size=16)  # the Gemma4AudioFeatureExtractor's
FULL_AUDIO_TOKENS = ("<|audio>", "<|audio|>", "<audio|>")
FULL_AUDIO_IDS = {"boa_token_id": 9, "audio_token_id": 10}


def _text(form: str, overrides: dict[str, Any]) -> dict[str, Any]:
    text: dict[str, Any] = dict(
        vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
        attention_k_eq_v=True, num_kv_shared_layers=4, use_double_wide_mlp=True, sliding_window=4,
        final_logit_softcapping=2.0, layer_types=list(LAYER_TYPES), max_position_embeddings=4096,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
        },
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=5, rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh", use_bidirectional_attention=None if form == "causal" else "vision",
    )  # fmt: skip
    if not form.startswith("unified"):  # per-layer embeddings exist in gemma4 / gemma4_text only
        text.update(hidden_size_per_layer_input=8, vocab_size_per_layer_input=384)
    text.update(overrides)
    n = text["num_hidden_layers"]
    if len(text["layer_types"]) != n:  # a pattern for other layer counts: every third and the last global
        text["layer_types"] = ["full_attention" if i % 3 == 2 or i == n - 1 else "sliding_attention" for i in range(n)]
    return text


def _tiny_audio(tf: Any) -> Any:
    return tf.Gemma4AudioConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[4, 4],
        conv_kernel_size=3, output_proj_dims=8,
    )  # fmt: skip


def _config(form: str, overrides: dict[str, Any]) -> Any:
    import transformers as tf

    top = {k: overrides.pop(k) for k in list(overrides) if k in TOKEN_IDS}
    with_audio = overrides.pop("with_audio", False)  # form "full": keep the tiny audio tower
    clipped = overrides.pop("clipped_linears", False)  # form "full": the tower's use_clipped_linears
    standardize = overrides.pop("standardize", False)  # form "full": the tower's standardize
    text = _text(form, overrides)
    if form == "causal":
        return tf.Gemma4TextConfig(**text)
    if form == "unified_causal":
        return tf.Gemma4UnifiedTextConfig(**text)
    ids = {**TOKEN_IDS, **top}
    if form == "full":  # a tower genai runs (docs/multimodal.md §13): no audio, the tokenizer's image ids
        vision = tf.Gemma4VisionConfig(**FULL_VISION, use_clipped_linears=clipped, standardize=standardize)
        audio = tf.Gemma4AudioConfig(**FULL_AUDIO).to_dict() if with_audio else None
        return tf.Gemma4Config(
            text_config=tf.Gemma4TextConfig(**text).to_dict(), vision_config=vision.to_dict(), audio_config=audio,
            tie_word_embeddings=text["tie_word_embeddings"],
            **{**ids, **FULL_IMAGE_IDS, **(FULL_AUDIO_IDS if with_audio else {})},
        )  # fmt: skip
    if form == "conditional":
        vision = tf.Gemma4VisionConfig(
            hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            head_dim=4, patch_size=2, pooling_kernel_size=2, position_embedding_size=16,
        )  # fmt: skip
        audio = _tiny_audio(tf)
        return tf.Gemma4Config(
            text_config=tf.Gemma4TextConfig(**text).to_dict(), vision_config=vision.to_dict(),
            audio_config=audio.to_dict(), tie_word_embeddings=text["tie_word_embeddings"], **ids,
        )  # fmt: skip
    vision = tf.Gemma4UnifiedVisionConfig(patch_size=2, pooling_kernel_size=2, mm_embed_dim=8, mm_posemb_size=8,
                                          output_proj_dims=8)  # fmt: skip
    audio = tf.Gemma4UnifiedAudioConfig(audio_embed_dim=8)
    return tf.Gemma4UnifiedConfig(text_config=tf.Gemma4UnifiedTextConfig(**text).to_dict(),
                                  vision_config=vision.to_dict(), audio_config=audio.to_dict(),
                                  tie_word_embeddings=text["tie_word_embeddings"], **ids)  # fmt: skip


def save_gemma4(
    out_dir: Path, form: str, seed: int = 0, dtype: str = "float32", max_shard_size: str | None = None, **overrides: Any
) -> Path:
    """Save a tiny random Gemma-4 checkpoint of `form` (text-config overrides as keywords) plus the tokenizer."""
    import torch
    import transformers as tf

    with_audio = bool(overrides.get("with_audio"))
    config = _config(form, dict(overrides))
    torch.manual_seed(seed)
    model = getattr(tf, CLASSES[form])(config)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 1 and "norm" in name:  # Gemma-4 norms multiply by w itself: keep it near 1
                param.copy_(1.0 + 0.3 * torch.randn(param.shape, generator=generator))
            elif param.ndim >= 2:
                scale = 0.2 if with_audio and "audio_tower" in name else 0.05  # scores far from uniform
                param.copy_(scale * torch.randn(param.shape, generator=generator))
            elif with_audio and name.endswith(("per_dim_scale", "output_proj.bias")):
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))
        for name, buffer in model.named_buffers():
            if "vision_tower" in name and name.endswith(("_min", "_max")):  # clipped linears' bounds
                buffer.fill_({"input": 0.8, "output": 0.1}[name.rsplit(".", 1)[1].split("_")[0]])
                buffer.mul_(-1.0 if name.endswith("_min") else 1.0)
            if name.endswith("std_bias"):  # standardize: (x - bias) * scale after pooling
                buffer.copy_(torch.randn(buffer.shape, generator=generator))
            if name.endswith("std_scale"):
                buffer.copy_(torch.empty(buffer.shape).uniform_(0.5, 1.5, generator=generator))
            if name.endswith("layer_scalar"):  # a saved buffer: scales the residual stream per layer
                buffer.copy_(torch.empty(buffer.shape).uniform_(0.5, 1.5, generator=generator))
    model.tie_weights()
    model = model.to(getattr(torch, dtype)).eval()
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    specials = (*FULL_IMAGE_TOKENS, *(FULL_AUDIO_TOKENS if with_audio else ())) if form == "full" else ()
    save_tokenizer(out_dir, vocab_size=384, extra_specials=specials)
    if form == "full":  # 70 soft tokens: at most 630 patches per image
        tf.Gemma4ImageProcessorPil(**FULL_PROCESSOR).save_pretrained(out_dir)
    if form == "full" and with_audio:  # the feature extractor's part of a processor_config.json
        features = json.loads(tf.Gemma4AudioFeatureExtractor(**FULL_FEATURES).to_json_string())
        (out_dir / "processor_config.json").write_text(json.dumps({"feature_extractor": features}))
    return out_dir


def mm_token_type_ids(model: Any, ids: list[int]) -> Any:
    """The processor's mm_token_type_ids for `ids`: 1 image, 2 video, 3 audio, 0 text."""
    import torch

    config = model.config
    kinds = {config.image_token_id: 1, config.video_token_id: 2, config.audio_token_id: 3}
    return torch.tensor([[kinds.get(t, 0) for t in ids]])
