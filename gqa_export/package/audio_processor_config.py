"""The audio feature extraction onnxruntime-genai runs before a speech model
(audio_processor_config.json: AudioDecoder -> Gemma4LogMel for Gemma-4, AudioDecoderEx ->
Phi4AudioEmbed for Phi-4-multimodal), from the checkpoint's feature extractor settings
(docs/multimodal.md §16.2, §20.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError

AUDIO_PROCESSOR = "audio_processor_config.json"  # genai's default speech.config_filename
LOG_MEL_TYPE = "Gemma4AudioFeatureExtractor"
PHI4_TYPE = "Phi4MultimodalFeatureExtractor"
# what onnxruntime-extensions' Phi4AudioEmbed fixes whatever its config says (SpeechLibLogMel:
# 16 kHz, pre-emphasis 0.97, mel filters over 0-7689 Hz in Kaldi's mel scale)
PHI4_FIXED = {"sampling_rate": 16000, "preemphasis": 0.97, "audio_downsample_rate": 1, "audio_feat_stride": 1,
              "mel_min_frequency": 0.0, "mel_max_frequency": 7690.0}  # fmt: skip


def feature_extractor(source: Path) -> dict[str, Any]:
    """The checkpoint's log-mel settings: the `feature_extractor` entry of processor_config.json
    (transformers 5.x writes every sub-processor there), else a preprocessor_config.json of that
    type, else {} (the extractor's defaults)."""
    combined = source / "processor_config.json"
    if combined.is_file():
        entry = json.loads(combined.read_text()).get("feature_extractor")
        if isinstance(entry, dict):
            return entry
    single = source / "preprocessor_config.json"
    if single.is_file():
        entry = json.loads(single.read_text())
        if entry.get("feature_extractor_type") in (LOG_MEL_TYPE, PHI4_TYPE):
            return entry
    return {}


def mel_bins(extractor: dict[str, Any]) -> int:
    return int(extractor.get("feature_size", 128))


def log_mel_config(extractor: dict[str, Any]) -> dict[str, Any]:
    """AudioDecoder -> Gemma4LogMel with the extractor's settings (HF's defaults where absent).
    Refused in one line: dithering (random per call: no runtime reproduces it) and an input
    scale other than 1 (Gemma4LogMel has no such attribute)."""
    if float(extractor.get("dither", 0.0) or 0.0) != 0.0:
        raise InputError("the audio feature extractor dithers (random noise per call): genai's Gemma4LogMel does not")
    if float(extractor.get("input_scale_factor", 1.0)) != 1.0:
        raise InputError("the audio feature extractor scales its input: genai's Gemma4LogMel cannot; use --text-only")
    rate = int(extractor.get("sampling_rate", 16000))
    frame = extractor.get("frame_length")
    hop = extractor.get("hop_length")
    attrs: dict[str, Any] = {
        "feature_size": mel_bins(extractor),
        "sampling_rate": rate,
        "frame_length_ms": float(frame) * 1000.0 / rate if frame else float(extractor.get("frame_length_ms", 20.0)),
        "hop_length_ms": float(hop) * 1000.0 / rate if hop else float(extractor.get("hop_length_ms", 10.0)),
        "min_frequency": float(extractor.get("min_frequency", 0.0)),
        "max_frequency": float(extractor.get("max_frequency", 8000.0)),
        "preemphasis": float(extractor.get("preemphasis", 0.0)),
        "preemphasis_htk_flavor": int(bool(extractor.get("preemphasis_htk_flavor", True))),
        "fft_overdrive": int(bool(extractor.get("fft_overdrive", False))),
        "mel_floor": float(extractor.get("mel_floor", 1e-3)),
    }
    for key in ("per_bin_mean", "per_bin_stddev"):
        if extractor.get(key) is not None:
            attrs[key] = [float(v) for v in extractor[key]]
    steps = [
        {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
        {"operation": {"name": "gemma4_log_mel", "type": "Gemma4LogMel", "attrs": attrs}},
    ]
    return {"feature_extraction": {"sequence": steps}}


def phi4_audio_config(extractor: dict[str, Any]) -> dict[str, Any]:
    """AudioDecoderEx (16 kHz, whole clips) -> Phi4AudioEmbed with the extractor's frame settings (HF's
    Phi4MultimodalFeatureExtractor defaults where absent) and the aligner genai's phi4mm processor
    reads audio_sizes through. Refused in one line: a setting Phi4AudioEmbed fixes (PHI4_FIXED,
    HF's defaults; its mel filters end at 7689 Hz where HF's 7690 Hz filters reach one FFT bin
    more: a runtime difference, docs/multimodal.md §20.2)."""
    for key, fixed in PHI4_FIXED.items():
        if float(extractor.get(key, fixed)) != fixed:
            raise InputError(
                f"the audio feature extractor's {key} is {extractor[key]}: onnxruntime-genai's Phi4AudioEmbed "
                f"computes {fixed:g} only; use --text-only"
            )
    fft, window, hop = (int(extractor.get(k, d)) for k, d in (("n_fft", 512), ("win_length", 400), ("hop_length", 160)))
    attrs: dict[str, Any] = {
        "audio_compression_rate": int(extractor.get("audio_compression_rate", 8)),
        "stft_normal/n_fft": fft,
        "stft_normal/frame_length": window,
        "stft_normal/hop_length": hop,
        "stft_normal/win_fn": "hamming",
        "logmel/chunk_size": 30,
        "logmel/hop_length": hop,
        "logmel/n_fft": fft,
        "logmel/n_mel": int(extractor.get("feature_size", 80)),
        "logmel/feature_first": 0,
        "logmel/no_padding": 1,
    }
    steps = [
        # max_samples 0: the decoder otherwise keeps the first 30 s of a clip (probed, genai 0.18)
        {
            "operation": {
                "name": "audio_decoder",
                "type": "AudioDecoderEx",
                "attrs": {"target_sample_rates": [16000], "max_samples": 0},
            }
        },
        {"operation": {"name": "phi_4_audio_embed", "type": "Phi4AudioEmbed", "attrs": attrs}},
    ]
    return {"feature_extraction": {"sequence": steps, "output_aligner": "phi4-audio-aligner"}}
