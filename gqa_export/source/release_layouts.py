"""Remote-code releases read as the transformers class they were ported to: the config converted and the
tensors that were renamed read under transformers' names, as transformers' own conversion script does
(docs/multimodal.md §15.7). Only releases whose port keeps every mechanism are listed; the package of
such a checkpoint is the one its transformers-layout twin gets.

Phi-4-multimodal's release (model_type `phi4mm`, `Phi4MMForCausalLM`, no transformers config class): its
`embd_layer` / `audio_processor` settings become `vision_config` / `audio_config` (transformers'
convert_phi4_multimodal_weights_to_hf.py: `attention_dim` -> `hidden_size`, `attention_heads` ->
`num_attention_heads`, `linear_units` -> `intermediate_size`, `nemo_conv_settings.conv_channels`,
`relative_attention_bias_args.t5_bias_max_distance`, the audio `downsample_rate`, the image `crop_size`;
the SigLIP tower's sizes are the class's defaults, which the release's code fixes, unless the config carries
transformers' own `vision_config`), and four audio-encoder module names differ. The decoder's `base_layer` /
LoRA tensors are the spec's aliases and source/merged_adapter.py's.

Phi-3-vision / Phi-3.5-vision's release (model_type `phi3_v`, `Phi3VForCausalLM`, no transformers class at all): its
decoder is Phi-3's, under Phi-3's names and config keys (`rope_scaling` of type `su` on Phi-3-vision, `longrope` on
3.5, which Phi3Config reads as longrope), so its config is read by Phi3Config with the image settings (`embd_layer`,
`img_processor`) joined as its `vision_config`, which the phi3v tower reads (package/towers.PHI3V: the CLIP tower
and projector under `model.vision_embed_tokens.`).

VideoChat-Flash's release (model_type `videochat_flash_qwen`, `VideoChatFlashQwenForCausalLM`): its config class is
Qwen2Config's subclass and its decoder Qwen2's under Qwen2's names, read as they are (its `mm_*` keys, which no
decoder reads, stay beside them: the UMT or InternVideo2 tower under `model.vision_tower.` and the projector under
`model.mm_projector.` read them, package/towers.VIDEOCHAT_FLASH, docs/coverage.md §36).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.weights import TensorInfo, WeightStore

_AUDIO = r"^(model\.embed_tokens_extend\.audio_embed\.encoder\.encoders\.\d+\.)"
# the release's module name -> transformers' (transformers' STATE_DICT_MAPPING for the class)
PHI4MM_RENAMES = (
    (re.compile(_AUDIO + r"feed_forward_(in|out)\.net\.0\.linear\."), r"\1feed_forward_\2.gate_up_proj."),
    (re.compile(_AUDIO + r"feed_forward_(in|out)\.net\.2\."), r"\1feed_forward_\2.down_proj."),
    (re.compile(_AUDIO + r"self_attn\.linear_(q|k|v)\."), r"\1self_attn.\2_proj."),
    (re.compile(_AUDIO + r"self_attn\.linear_out\."), r"\1self_attn.o_proj."),
)
_AUDIO_RENAMED_KEYS = {"attention_dim": "hidden_size", "attention_heads": "num_attention_heads",
                       "linear_units": "intermediate_size"}  # fmt: skip
_AUDIO_DROPPED = ("activation_checkpointing", "cnn_layer_norm", "input_layer", "encoder_embedding_config")


# a listed release's model_type -> the transformers model_type whose config class reads it
RELEASES = {"phi4mm": "phi4_multimodal", "phi3_v": "phi3", "videochat_flash_qwen": "qwen2"}
# the image settings a Phi-3-vision config carries beside Phi-3's keys (its remote code's, not Phi3Config's)
_PHI3V_IMAGE_KEYS = ("embd_layer", "img_processor")


def release_model_type(raw: dict[str, Any]) -> str | None:
    """The transformers model_type a remote-code release's config is converted to, None for any other."""
    return RELEASES.get(str(raw.get("model_type")))


def converted_config(raw: dict[str, Any]) -> dict[str, Any]:
    """config.json of a listed release as transformers' class reads it (its model_type kept for the manifest)."""
    config = copy.deepcopy(raw)
    for key in ("_name_or_path", "auto_map", "transformers_version", "_attn_implementation"):
        config.pop(key, None)
    if raw.get("model_type") == "phi3_v":  # Phi-3's config; the image settings, which no decoder reads, as one
        vision = {}  # vision_config (the tower's row reads it: package/towers.PHI3V)
        for key in _PHI3V_IMAGE_KEYS:
            vision.update(config.pop(key, None) or {})
        config["vision_config"] = vision or None
        return config
    embd = config.pop("embd_layer", {}) or {}
    audio = dict((config.pop("audio_processor", {}) or {}).get("config", {}) or {})
    for key in _AUDIO_DROPPED:
        audio.pop(key, None)
    for old, new in _AUDIO_RENAMED_KEYS.items():
        if old in audio:
            audio[new] = audio.pop(old)
    if "nemo_conv_settings" in audio:
        audio["nemo_conv_channels"] = audio.pop("nemo_conv_settings")["conv_channels"]
    if "relative_attention_bias_args" in audio:
        audio["bias_max_distance"] = audio.pop("relative_attention_bias_args")["t5_bias_max_distance"]
    audio_embd, image_embd = embd.get("audio_embd_layer", {}) or {}, embd.get("image_embd_layer", {}) or {}
    audio.update({k: v for k, v in audio_embd.items() if k == "downsample_rate"})
    vision = {k: v for k, v in image_embd.items() if k in ("use_hd_transform", "crop_size", "hd_transform_order")}
    config["vision_config"] = {**vision, **(config.get("vision_config") or {})}
    config["audio_config"] = {**audio, **(config.get("audio_config") or {})}
    return config


# Phi-3-vision's remote code shares the decoder's embedding table with its image embedder (`wte`): a save
# that keeps one name of the shared tensor may keep that one, read then as the decoder's
_PHI3V_RENAMES = ((re.compile(r"^model\.vision_embed_tokens\.wte\.weight$"), "model.embed_tokens.weight"),)


def release_views(store: WeightStore, raw: dict[str, Any]) -> WeightStore:
    """`store` with each tensor a listed release stores under another name viewed under transformers' name."""
    # a listed release -> its renamed modules (pattern, transformers' name); a name transformers' layout also has wins
    renames = {"phi4mm": PHI4MM_RENAMES, "phi3_v": _PHI3V_RENAMES}.get(str(raw.get("model_type")))
    if renames is None:
        return store
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for name in store.names():
        for pattern, replacement in renames:
            new, hits = pattern.subn(replacement, name)
            if hits and new not in store:
                info = store.info(name)
                views[new] = (view_info(info, info.shape), lambda n=name: store.read(n))
                break
    return ViewStore(store, views) if views else store
