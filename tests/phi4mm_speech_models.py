"""A tiny Phi-4-multimodal checkpoint for its speech model (docs/multimodal.md §20.4): 2 conformer
blocks of width 32, 2 heads, 16 mel bins, subsampling by 8 through 4 channels, streaming chunks of
3 rows with 1 chunk to the left, relative bias clipped at 4; the audio norms, biases, GLU biases,
input norm and bias table random so that every mechanism moves the rows. Clips are a sine plus
noise at 16 kHz, odd lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

AUDIO = dict(
    audio_token_id=301, hidden_size=32, intermediate_size=48, num_blocks=2, num_attention_heads=2,
    ext_pw_out_channel=32, depthwise_separable_out_channel=32, nemo_conv_channels=4, input_size=16,
    chunk_size=3, left_chunk=1, bias_max_distance=4, time_reduction=8,
)  # fmt: skip
TEXT = dict(
    vocab_size=320, pad_token_id=0, bos_token_id=1, eos_token_id=2, hidden_size=48, intermediate_size=64,
    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)  # fmt: skip
VISION = dict(image_token_id=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
RATE = 16000
MEL = 16
# samples per clip: 10001 -> 61 frames -> 8 rows; 4567 -> 27 frames -> 4 rows (3 chunks and 2)
CLIPS = (10001, 4567)


def phi4_config(**audio: Any) -> Any:
    import transformers as tf

    return tf.Phi4MultimodalConfig(**TEXT, vision_config=VISION, audio_config={**AUDIO, **audio})


def save_speech_checkpoint(path: Path) -> tuple[Any, Path]:
    """(HF's Phi4MultimodalAudioEmbedding, the saved checkpoint folder)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model = tf.Phi4MultimodalForCausalLM(phi4_config()).eval()
    audio = model.model.embed_tokens_extend.audio_embed
    with torch.no_grad():  # HF inits norms to ones, biases and b1 / b2 to zeros: random ones test the wiring
        for name, param in audio.named_parameters():
            scale = 1.0 if "bias_values" in name else 0.3 if "layer_norm" in name or name.endswith("bias") else 0.2
            param.copy_(torch.randn_like(param) * scale + (1.0 if "layer_norm.weight" in name else 0.0))
        norm = audio.encoder.encoder_embedding
        norm.global_mean.copy_(torch.randn_like(norm.global_mean))
        norm.global_invstd.copy_(torch.rand_like(norm.global_invstd) + 0.5)
    model.save_pretrained(path)
    return audio, path


def waveforms() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        (0.4 * np.sin(2 * np.pi * tone * np.arange(n) / RATE) + 0.05 * rng.standard_normal(n)).astype(np.float32)
        for n, tone in zip(CLIPS, (440.0, 1250.0), strict=True)
    ]


def hf_features(clips: list[np.ndarray], **settings: Any) -> dict[str, np.ndarray]:
    """HF's Phi4MultimodalFeatureExtractor (16 bins): features, audio_embed_sizes, the mask (a batch only)."""
    from transformers import Phi4MultimodalFeatureExtractor

    extractor = Phi4MultimodalFeatureExtractor(feature_size=MEL)
    for key, value in settings.items():
        setattr(extractor, key, value)
    out = extractor(clips, sampling_rate=RATE, return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}


def speech_model(path: Path, text_hidden: int = TEXT["hidden_size"]) -> Any:
    """The speech graph (onnx-ir model) of the checkpoint at `path`, float32."""
    import onnx_ir as ir
    import transformers as tf

    from gqa_export.graph.encoders import nemo_conformer
    from gqa_export.graph.params import Params
    from gqa_export.source.weights import WeightStore

    store = WeightStore.open(path)
    dims = nemo_conformer.nemo_conformer_dims(tf.AutoConfig.from_pretrained(path), text_hidden, store, MEL)
    return nemo_conformer.build_nemo_conformer(dims, Params(store, ir.DataType.FLOAT))


def write_wav(path: Path, samples: np.ndarray) -> Path:
    """`samples` in [-1, 1] as a 16-bit mono wav file at RATE."""
    import wave

    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(np.clip(np.round(samples * 32767), -32768, 32767).astype(np.int16).tobytes())
    return path
