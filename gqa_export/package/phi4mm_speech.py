"""Phi-4-multimodal's speech model in onnxruntime-genai's phi4mm package: what its `AudioTower`
row (package/towers.py) reads: the encoder's dims from the audio config and the feature extractor
settings, refused in one line where genai cannot run them; the graph builder
(graph/encoders/nemo_conformer.py); the audio_processor_config.json writer; genai's speech input
names (docs/multimodal.md §20)."""

from __future__ import annotations

from typing import Any

from gqa_export.errors import InputError
from gqa_export.graph.encoders.nemo_conformer import NemoConformerDims, build_nemo_conformer, nemo_conformer_dims
from gqa_export.model.dims import ModelDims
from gqa_export.package.audio_processor_config import phi4_audio_config
from gqa_export.source.weights import WeightStore

# genai's phi4mm processor expands this id (its <|endoftext11|>) whatever the config says
GENAI_AUDIO_TOKEN = 200011
# genai's model.speech.inputs: key -> graph input name (genai reads audio_sizes itself too, to size
# the output and expand the prompt; audio_projection_mode is fed under its default name)
SPEECH_INPUTS = (
    ("audio_embeds", "audio_embeds"),
    ("attention_mask", "audio_attention_mask"),
    ("audio_sizes", "audio_sizes"),
    ("audio_projection_mode", "audio_projection_mode"),
)

__all__ = ["SPEECH_INPUTS", "build_nemo_conformer", "phi4_audio_config", "phi4mm_speech_dims"]


def phi4mm_speech_dims(
    hf_config: Any, dims: ModelDims, store: WeightStore, features: dict[str, Any]
) -> NemoConformerDims:
    """The speech encoder's dims, or InputError: an audio token genai's processor does not expand,
    audio sizes (the extractor's audio_compression_rate) that are not the tower's rows."""
    audio = hf_config.audio_config
    if int(audio.audio_token_id) != GENAI_AUDIO_TOKEN:
        raise InputError(
            f"audio_token_id {audio.audio_token_id}: onnxruntime-genai's phi4mm processor expands "
            f"{GENAI_AUDIO_TOKEN} only; use --text-only"
        )
    rate = int(features.get("audio_compression_rate", 8))
    if rate != int(audio.time_reduction):
        raise InputError(
            f"the feature extractor's audio_compression_rate {rate} differs from the audio tower's "
            f"time_reduction {audio.time_reduction}; use --text-only"
        )
    return nemo_conformer_dims(hf_config, dims.hidden_size, store, int(features.get("feature_size", 80)))
