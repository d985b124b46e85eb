"""A tiny random Phi4MultimodalForCausalLM for the phi4mm package tests (tests/package/multimodal/,
tests/source/test_merged_adapter.py): the ids genai's phi4mm processor hard-codes (image 200010, audio 200011)
force a 200016-row vocab, so the decoder stays 32 wide and its tables small."""

from __future__ import annotations

import json
from pathlib import Path

IMAGE, AUDIO, VOCAB, HIDDEN = 200010, 200011, 200016, 32
S, M, B = 448, 32, 16  # crop pixels, patches per crop side, pooled features per crop side


def save_phi4mm(out_dir: Path, seed: int = 0, crop: int = S, vocab: int = VOCAB) -> Path:
    """A tiny random Phi4MultimodalForCausalLM, its tokenizer (<|endoftext10|> / <|endoftext11|> at
    200010 / 200011, as the published one) and preprocessor_config (at most 4 crops). With a smaller
    `vocab` the placeholder ids are 300 / 301 and only the model is saved (a tower to compare alone)."""
    import torch
    import transformers as tf
    from tiny_models import randomize_norms, save_tokenizer

    audio = dict(num_blocks=1, hidden_size=16, intermediate_size=16, num_attention_heads=2, ext_pw_out_channel=16,
                 depthwise_separable_out_channel=16, nemo_conv_channels=16)  # fmt: skip
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                  crop_size=crop, image_size=crop, image_token_id=IMAGE if vocab > IMAGE else 300)  # fmt: skip
    if vocab <= AUDIO:
        audio["audio_token_id"] = 301
    config = tf.Phi4MultimodalConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, original_max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75},
        bos_token_id=0, eos_token_id=1, pad_token_id=5, initializer_range=0.2, tie_word_embeddings=True,
        vision_config=vision, audio_config=audio, architectures=["Phi4MultimodalForCausalLM"],
    )  # fmt: skip
    torch.manual_seed(seed)
    model = tf.Phi4MultimodalForCausalLM(config).eval()
    randomize_norms(model, biases=True)
    image = model.model.embed_tokens_extend.image_embed
    with torch.no_grad():  # separators and a position table far from 0; a tower whose layers matter
        for param in (image.sub_img_feature_extensor, image.global_img_feature_extensor):
            param.normal_(0.0, 1.0)
        image.img_processor.embeddings.position_embedding.weight.normal_(0.0, 1.0)
        for name, param in image.img_processor.encoder.named_parameters():
            if name.endswith("weight") and param.dim() == 2:
                param.normal_(0.0, 0.25)
    generation = model.generation_config
    generation.bos_token_id, generation.eos_token_id, generation.pad_token_id = 0, 1, 5
    model.save_pretrained(out_dir)
    if vocab <= AUDIO:
        return out_dir
    save_tokenizer(out_dir, vocab_size=384)
    data = json.loads((out_dir / "tokenizer.json").read_text())
    for token, text in ((IMAGE, "<|endoftext10|>"), (AUDIO, "<|endoftext11|>")):
        data["model"]["vocab"][text] = token
        data["added_tokens"].append({"id": token, "content": text, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})  # fmt: skip
    (out_dir / "tokenizer.json").write_text(json.dumps(data))
    pre = {"image_processor_type": "Phi4MultimodalImageProcessor", "dynamic_hd": 4, "patch_size": 14,
           "size": {"height": S, "width": S}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}  # fmt: skip
    (out_dir / "preprocessor_config.json").write_text(json.dumps(pre))
    return out_dir
