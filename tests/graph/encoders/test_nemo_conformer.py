"""Phi-4-multimodal's speech graph (graph/encoders/nemo_conformer.py) equals transformers'
`Phi4MultimodalAudioEmbedding` through onnxruntime: the concatenated audio rows it scatters into the
prompt, for both projectors (docs/multimodal.md §20.4), on tests/phi4mm_speech_models.py's tiny
checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from phi4mm_speech_models import (
    AUDIO,
    MEL,
    TEXT,
    hf_features,
    phi4_config,
    save_speech_checkpoint,
    speech_model,
    waveforms,
)

from gqa_export.errors import InputError
from gqa_export.graph.encoders import conformer_windows, nemo_conformer

LONG_FRAMES = 4013  # 502 subsampled rows: two 500-row windows, the second padded with 498 rows


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    return save_speech_checkpoint(tmp_path_factory.mktemp("phi4mm_speech"))


def hf_rows(audio: Any, features: np.ndarray, sizes: np.ndarray, mask: np.ndarray | None, mode: str) -> np.ndarray:
    """Phi4MultimodalAudioEmbedding's merged rows: what it writes at the audio placeholders."""
    import torch

    count = int(sizes.sum())
    ids = torch.full((1, count), AUDIO["audio_token_id"])
    with torch.no_grad():
        out = audio(ids, torch.zeros(1, count, TEXT["hidden_size"]), torch.from_numpy(features),
                    audio_embed_sizes=torch.from_numpy(sizes),
                    audio_attention_mask=None if mask is None else torch.from_numpy(mask),
                    audio_projection_mode=mode)  # fmt: skip
    return out[0].numpy()


def speech_session(path: Path, flip_kernel: bool = False):
    import onnx_ir as ir
    import onnxruntime as ort

    model = speech_model(path)
    for node in model.graph:  # mutant: the depthwise kernel read back to front
        if flip_kernel and node.op_type == "Conv" and node.inputs[1].name.endswith("dw_conv.weight"):
            kernel = node.inputs[1].const_value.numpy()
            node.inputs[1].const_value = ir.Tensor(np.ascontiguousarray(kernel[..., ::-1]), name=node.inputs[1].name)
    return ort.InferenceSession(ir.to_proto(model).SerializeToString())


def feed(features: np.ndarray, sizes: np.ndarray, mask: np.ndarray | None, mode: int) -> dict[str, np.ndarray]:
    return {
        "audio_embeds": features.astype(np.float32),
        "audio_attention_mask": np.ones(features.shape[:2], bool) if mask is None else mask,
        "audio_sizes": sizes.astype(np.int64),
        "audio_projection_mode": np.array([mode], np.int64),
    }


@pytest.fixture(scope="module")
def cases(tower) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(speech.onnx feed, HF's rows): the two clips in one batch (HF's padded features and mask)
    under each projector, each clip alone (no mask, as HF's extractor gives one clip), and
    random frames 4013 long (two 500-row windows; HF 5.25's unfold raises on a batch of them)."""
    audio, _ = tower
    clips = waveforms()
    made = []
    batch = hf_features(clips)
    for mode, name in ((2, "speech"), (3, "vision")):
        args = (batch["audio_input_features"], batch["audio_embed_sizes"], batch["audio_attention_mask"])
        made.append((feed(*args, mode), hf_rows(audio, *args, name)))
    for clip in clips:
        one = hf_features([clip])
        assert "audio_attention_mask" not in one  # HF's extractor: no mask for one clip
        args = (one["audio_input_features"], one["audio_embed_sizes"], None)
        made.append((feed(*args, 2), hf_rows(audio, *args, "speech")))
    long = np.random.default_rng(1).standard_normal((1, LONG_FRAMES, MEL)).astype(np.float32) * 2 + 8
    sizes = np.array([-(-LONG_FRAMES // 8)])
    made.append((feed(long, sizes, None, 3), hf_rows(audio, long, sizes, None, "vision")))
    return made


def speech_error(session, cases) -> float:
    return max(float(np.abs(session.run(None, f)[0] - ref).max()) for f, ref in cases)


def test_speech_rows_match_hf(tower, cases):
    """Both projectors, a padded batch of two odd-length clips, each clip alone, two 500-row
    windows: within 1e-4 of HF."""
    rows = [ref.shape[0] for _, ref in cases]
    assert rows == [12, 12, 8, 4, 502]
    assert speech_error(speech_session(tower[1]), cases) < 1e-4


MUTANTS = {
    "relative_bias_reversed": lambda mp: mp.setattr(conformer_windows, "_relative_bias", _reversed_bias),
    "projector_swapped": lambda mp: mp.setattr(nemo_conformer, "VISION_SPEECH_MODE", 2),
    "window_400_rows": lambda mp: mp.setattr(conformer_windows, "HF_WINDOW", 400),
    "chunk_mask_off": lambda mp: mp.setattr(
        conformer_windows, "_chunk_mask", lambda b, rows, shape: _ORIGINAL_CHUNKS(b, rows, _no_chunks(shape))
    ),
    "one_clip_keys_masked": lambda mp: mp.setattr(conformer_windows, "_valid_rows", _masked_rows),
    "full_feed_forward_residual": lambda mp: mp.setattr(nemo_conformer, "FEED_FORWARD_WEIGHT", 1.0),
    "kernel_flipped": lambda mp: None,
    "mask_as_minus_inf": lambda mp: mp.setattr(conformer_windows, "_added_mask", _minus_inf),
}
_ORIGINAL_POSITIONS = conformer_windows._positions
_ORIGINAL_CHUNKS = conformer_windows._chunk_mask
_ORIGINAL_ROWS = conformer_windows._valid_rows
_ORIGINAL_BIAS = conformer_windows._relative_bias


def _reversed_bias(b, rows, shape, table, params):
    """The bias looked up at i - j (not j - i)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conformer_windows, "_positions", lambda b, rows: _ORIGINAL_POSITIONS(b, rows)[::-1])
        return _ORIGINAL_BIAS(b, rows, shape, table, params)


def _minus_inf(b, allowed):
    """The mask as attention masks usually are: 0 where allowed, -1e9 elsewhere (HF adds 1 / 0)."""
    values = b.op("Where", allowed, b.const(np.float32(0.0), "z"), b.const(np.float32(-1e9), "inf"))
    return b.op("Unsqueeze", values, b.const([1], "h", np.int64))


def _no_chunks(shape: Any) -> Any:
    import dataclasses

    return dataclasses.replace(shape, chunk=-1)


def _masked_rows(b, frame_mask, padded, reduction):
    """The window padding masked for one clip too (HF's extractor gives it no mask: all valid)."""
    two = b.op("Concat", frame_mask, frame_mask, axis=0)
    rows = _ORIGINAL_ROWS(b, two, padded, reduction)
    return b.op("Slice", rows, b.const([0], "s", np.int64), b.op("Shape", frame_mask, start=0, end=1),
                b.const([0], "a", np.int64))  # fmt: skip


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_speech_mutants_fail(tower, cases, monkeypatch, mutant):
    """The relative distances read as i - j, the projectors swapped, 400-row windows, the streaming
    chunks ignored, one clip's window padding masked, the feed-forward halves as full residuals,
    the depthwise kernel flipped, the mask as -1e9 (not HF's added 1 / 0): each leaves the bound."""
    MUTANTS[mutant](monkeypatch)
    session = speech_session(tower[1], flip_kernel=mutant == "kernel_flipped")
    assert speech_error(session, cases) > 1e-3


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"downsample_rate": 2}, "audio downsample_rate 2"),
        ({"bias_symmetric": True}, "a symmetric relative attention bias"),
        ({"time_reduction": 6}, "time_reduction 6 is not a power of 2"),
        ({"conv_glu_type": "tanh"}, "audio conv_glu_type 'tanh' is not supported"),
        ({"input_size": 80}, "feature_size 16 for an audio tower of input_size 80"),
    ],
)
def test_speech_refusals(tower, change, phrase):
    from gqa_export.source.weights import WeightStore

    with pytest.raises(InputError, match=phrase):
        nemo_conformer.nemo_conformer_dims(phi4_config(**change), 48, WeightStore.open(tower[1]), MEL)
