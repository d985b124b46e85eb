"""Phi-4-multimodal's speech model in onnxruntime-genai's phi4mm package (docs/multimodal.md §20):
the audio_processor_config.json writer and its refusals, the AudioTower row's dims refusals, and
genai 0.18's phi4mm processor on that config: the same frames and audio sizes as HF's
Phi4MultimodalFeatureExtractor, log-mel features equal to HF's extractor run with genai's mel
filters, the prompt expanded to the audio sizes, and genai running speech.onnx in its pipeline.

The package around speech.onnx is a stand-in written here (the vision / embedding / decoder graphs
are a few ops each, a tokenizer with <|endoftext11|> as id 200011): enough for genai to load it,
process a clip and take one step; the image side is not this file's."""

from __future__ import annotations

import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from phi4mm_speech_models import (
    MEL,
    RATE,
    TEXT,
    hf_features,
    phi4_config,
    save_speech_checkpoint,
    speech_model,
    write_wav,
)
from phi4mm_speech_models import waveforms as make_waveforms

from gqa_export.errors import InputError
from gqa_export.package.audio_processor_config import feature_extractor, phi4_audio_config
from gqa_export.package.phi4mm_speech import SPEECH_INPUTS, phi4mm_speech_dims

H = TEXT["hidden_size"]
VOCAB = 320
LONG_SECONDS = 31  # past the 30 s genai's audio decoder keeps unless told max_samples 0


def _mel_filters(n_fft: int, n_mels: int, sr: int = 16000, fmax: float = 7689.0) -> np.ndarray:
    """onnxruntime-extensions' SpeechLibLogMel::MelFilterBank ([n_mels, bins], float32 as it
    computes): triangles in Kaldi's mel scale over FFT bins 1 .. round(fmax)-1, 0 Hz to 7689 Hz."""
    f32 = np.float32

    def mel(f: float) -> np.float32:
        return f32(1127.0) * np.log(f32(1.0) + f32(f) / f32(700.0))

    low, high = 1, int(f32(fmax * n_fft) / f32(sr) + f32(0.5))
    step = (mel(fmax) - mel(0.0)) / f32(n_mels + 1)
    centers = [mel(0.0) + f32(i) * step for i in range(n_mels + 2)]
    bank = np.zeros((n_mels, n_fft // 2 + 1), np.float32)
    for m in range(n_mels):
        for k in range(low, high):
            at = mel(f32(f32(k) * sr) / f32(n_fft))
            if centers[m] < at < centers[m + 2]:
                bank[m, k] = max(0.0, 1.0 - abs(centers[m + 1] - at) / step)
    return bank


def _pcm(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as clip:
        return np.frombuffer(clip.readframes(clip.getnframes()), np.int16).astype(np.float32) / 32768.0


def _save(folder: Path, name: str, nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray]) -> None:
    import onnx
    import onnx.helper as oh

    tensors = [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = oh.make_graph(nodes, name, inputs, outputs, tensors)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), folder / name)


def _stand_ins(folder: Path) -> np.ndarray:
    """vision.onnx (zeros per image), embedding.onnx (ids as zeros + the sum of the audio rows at
    every position), model.onnx (logits = embeddings @ W, the KV cache grown by zeros). Returns W."""
    import onnx
    import onnx.helper as oh

    f32, i64, v = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, oh.make_tensor_value_info
    zero = oh.make_tensor("zero", f32, [1], [0.0])
    _save(folder, "vision.onnx",
          [oh.make_node("Shape", ["pixel_values"], ["n"], start=0, end=1),
           oh.make_node("Concat", ["n", "width"], ["shape"], axis=0),
           oh.make_node("ConstantOfShape", ["shape"], ["image_features"], value=zero)],
          [v("pixel_values", f32, ["n", 3, "h", "w"]), v("image_attention_mask", f32, ["n", "a", "b"]),
           v("image_sizes", i64, ["n", 2])], [v("image_features", f32, ["t", H])],
          {"width": np.array([H], np.int64)})  # fmt: skip
    _save(folder, "embedding.onnx",
          [oh.make_node("Min", ["input_ids", "top"], ["ids"]), oh.make_node("Gather", ["table", "ids"], ["e"]),
           oh.make_node("ReduceSum", ["audio_features", "rows"], ["a"], keepdims=1),
           oh.make_node("Add", ["e", "a"], ["inputs_embeds"])],
          [v("input_ids", i64, ["b", "s"]), v("image_features", f32, ["t", H]), v("audio_features", f32, ["u", H])],
          [v("inputs_embeds", f32, ["b", "s", H])],
          {"table": np.zeros((VOCAB, H), np.float32), "top": np.array(VOCAB - 1), "rows": np.array([0])})  # fmt: skip
    weight = np.random.default_rng(0).standard_normal((H, VOCAB)).astype(np.float32)
    past = [v(f"past_key_values.0.{kv}", f32, ["b", 1, "p", 24]) for kv in ("key", "value")]
    present = [v(f"present.0.{kv}", f32, ["b", 1, "q", 24]) for kv in ("key", "value")]
    _save(folder, "model.onnx",
          [oh.make_node("MatMul", ["inputs_embeds", "w"], ["logits"]),
           oh.make_node("Shape", ["inputs_embeds"], ["b"], start=0, end=1),
           oh.make_node("Shape", ["inputs_embeds"], ["s"], start=1, end=2),
           oh.make_node("Concat", ["b", "one", "s", "head"], ["new"], axis=0),
           oh.make_node("ConstantOfShape", ["new"], ["z"], value=zero),
           *(oh.make_node("Concat", [f"past_key_values.0.{kv}", "z"], [f"present.0.{kv}"], axis=2)
             for kv in ("key", "value"))],
          [v("inputs_embeds", f32, ["b", "s", H]), v("attention_mask", i64, ["b", "t"]), *past],
          [v("logits", f32, ["b", "s", VOCAB]), *present],
          {"w": weight, "one": np.array([1]), "head": np.array([24])})  # fmt: skip
    return weight


def _genai_config() -> dict[str, Any]:
    decoder = {"filename": "model.onnx", "hidden_size": H, "num_attention_heads": 2, "num_key_value_heads": 1,
               "num_hidden_layers": 1, "head_size": 24,
               "inputs": {"inputs_embeds": "inputs_embeds", "attention_mask": "attention_mask",
                          "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
               "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                           "present_value_names": "present.%d.value"}}  # fmt: skip
    return {
        "model": {
            "type": "phi4mm", "vocab_size": VOCAB, "context_length": 256, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0, "decoder": decoder,
            "embedding": {"filename": "embedding.onnx", "inputs": {"input_ids": "input_ids",
                          "image_features": "image_features", "audio_features": "audio_features"},
                          "outputs": {"inputs_embeds": "inputs_embeds"}},
            "vision": {"filename": "vision.onnx", "config_filename": "vision_processor.json",
                       "inputs": {"pixel_values": "pixel_values", "image_sizes": "image_sizes",
                                  "attention_mask": "image_attention_mask"},
                       "outputs": {"image_features": "image_features"}},
            "speech": {"filename": "speech.onnx", "config_filename": "audio_processor_config.json",
                       "inputs": dict(SPEECH_INPUTS), "outputs": {"audio_features": "audio_features"}},
        },
        "search": {"max_length": 64, "do_sample": False},
    }  # fmt: skip


def _tokenizer(folder: Path) -> None:
    """The tiny BPE tokenizer plus <|endoftext10|> / <|endoftext11|> as ids 200010 / 200011 (what
    genai's phi4mm processor rewrites <|image_k|> / <|audio_k|> into and expands)."""
    from tiny_models import save_tokenizer

    save_tokenizer(folder)
    spec = json.loads((folder / "tokenizer.json").read_text())
    for token_id, text in ((200010, "<|endoftext10|>"), (200011, "<|endoftext11|>")):
        spec["added_tokens"].append({"id": token_id, "content": text, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(spec))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_speech_checkpoint(tmp_path_factory.mktemp("phi4mm_ckpt"))[1]


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    import onnx_ir as ir

    folder = tmp_path_factory.mktemp("phi4mm_speech_pkg")
    ir.save(speech_model(checkpoint), folder / "speech.onnx")
    weight = _stand_ins(folder)
    _tokenizer(folder)
    decode = {"operation": {"name": "decode_image", "type": "DecodeImage", "attrs": {"color_space": "RGB"}}}
    (folder / "vision_processor.json").write_text(json.dumps({"processor": {"name": "x", "transforms": [decode]}}))
    (folder / "audio_processor_config.json").write_text(json.dumps(phi4_audio_config({"feature_size": MEL})))
    (folder / "genai_config.json").write_text(json.dumps(_genai_config()))
    return folder, weight


@pytest.fixture(scope="module")
def clips(package) -> list[Path]:
    folder = package[0]
    made = [write_wav(folder / f"clip{i}.wav", x) for i, x in enumerate(make_waveforms())]
    t = np.arange(LONG_SECONDS * RATE) / RATE
    return [*made, write_wav(folder / "long.wav", (0.3 * np.sin(2 * np.pi * 300.0 * t)).astype(np.float32))]


def genai_process(folder: Path, clip: Path) -> tuple[Any, Any, dict[str, np.ndarray]]:
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    inputs = model.create_multimodal_processor()("hi <|audio_1|> what", audios=og.Audios.open(str(clip)))
    names = ("input_ids", "audio_embeds", "audio_sizes", "audio_attention_mask", "audio_projection_mode")
    return model, inputs, {name: inputs[name].as_numpy() for name in names}


def test_genai_extractor_matches_hf(package, clips):
    """Each clip: genai's frames, audio_sizes and mask are HF's (61 frames -> 8, 27 -> 4, 31 s ->
    3098 frames -> 388, not cut to 30 s), the prompt's marker expands to audio_sizes ids 200011,
    the projection mode is 2 (no image); the log-mel features equal HF's extractor run with genai's
    mel filters within 1e-4 (1.3e-5 measured) and HF's own within 1e-2 (7.7e-3 measured: HF's
    7690 Hz filters reach FFT bin 246, genai's 7689 Hz ones stop at 245)."""
    for clip in clips:
        _, _, got = genai_process(package[0], clip)
        pcm = _pcm(clip)
        hf = hf_features([pcm])
        frames = (len(pcm) - 400) // 160 + 1
        assert got["audio_embeds"].shape == hf["audio_input_features"].shape == (1, frames, MEL)
        assert got["audio_sizes"].tolist() == hf["audio_embed_sizes"].tolist() == [-(-frames // 8)]
        assert got["audio_attention_mask"].all() and got["audio_projection_mode"].tolist() == [2]
        assert (got["input_ids"] == 200011).sum() == got["audio_sizes"][0]
        if clip.name == "long.wav":
            continue
        own = hf_features([pcm], mel_filters=_mel_filters(512, MEL).T.astype(np.float64))["audio_input_features"]
        assert np.abs(got["audio_embeds"] - own).max() < 1e-4
        assert 1e-4 < np.abs(got["audio_embeds"] - hf["audio_input_features"]).max() < 1e-2


def test_genai_two_clips_pad_with_zeros(package, clips):
    """Two clips in one prompt: genai stacks them with HF's mask and sizes (61 and 27 frames, 8 + 4
    ids), the valid frames as HF's (genai's filters, 1e-4), but the shorter clip's padding frames
    are zeros where HF's extractor leaves the two frames straddling its end: the rows of that clip
    then differ from HF's batch (docs/multimodal.md §20.3)."""
    import onnxruntime_genai as og

    model = og.Model(str(package[0]))
    files = og.Audios.open(*(str(c) for c in clips[:2]))
    inputs = model.create_multimodal_processor()("a <|audio_1|> b <|audio_2|> c", audios=files)
    got = {
        name: inputs[name].as_numpy() for name in ("input_ids", "audio_embeds", "audio_sizes", "audio_attention_mask")
    }
    pcms = [_pcm(c) for c in clips[:2]]
    filters = _mel_filters(512, MEL).T.astype(np.float64)
    hf, own = hf_features(pcms), hf_features(pcms, mel_filters=filters)
    valid = got["audio_attention_mask"].astype(bool)
    assert (valid == hf["audio_attention_mask"]).all() and valid.sum(1).tolist() == [61, 27]
    assert got["audio_sizes"].tolist() == hf["audio_embed_sizes"].tolist() == [8, 4]
    assert (got["input_ids"] == 200011).sum() == 12
    assert np.abs(got["audio_embeds"][valid] - own["audio_input_features"][valid]).max() < 1e-4
    assert not got["audio_embeds"][~valid].any() and np.abs(hf["audio_input_features"][1, 27:29]).min() > 1.0


@pytest.mark.parametrize("mutant", ["hann_window", "max_samples_dropped"])
def test_genai_extractor_mutants_fail(package, clips, tmp_path, mutant):
    """A Hann window (not Hamming) moves the features past 1e-4; without max_samples genai keeps
    30 s of the 31 s clip (2998 frames)."""
    import shutil

    folder = Path(shutil.copytree(package[0], tmp_path / "pkg"))
    config = phi4_audio_config({"feature_size": MEL})
    steps = config["feature_extraction"]["sequence"]
    if mutant == "hann_window":
        steps[1]["operation"]["attrs"]["stft_normal/win_fn"] = "hann"
    else:
        del steps[0]["operation"]["attrs"]["max_samples"]
    (folder / "audio_processor_config.json").write_text(json.dumps(config))
    clip = clips[0] if mutant == "hann_window" else clips[-1]
    _, _, got = genai_process(folder, clip)
    pcm = _pcm(clip)
    if mutant == "max_samples_dropped":
        assert got["audio_embeds"].shape[1] == (30 * RATE - 400) // 160 + 1 != (len(pcm) - 400) // 160 + 1
        return
    own = hf_features([pcm], mel_filters=_mel_filters(512, MEL).T.astype(np.float64))["audio_input_features"]
    assert np.abs(got["audio_embeds"] - own).max() > 1e-4


def test_genai_runs_speech_model(package, clips):
    """genai runs speech.onnx on its features (output [audio_sizes rows, hidden]) and hands the rows
    to the embedding model: one step's logits are the stand-in decoder's on the rows' sum, with the
    rows from onnxruntime on genai's feed."""
    import onnxruntime as ort
    import onnxruntime_genai as og

    folder, weight = package
    model, inputs, got = genai_process(folder, clips[0])
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=64, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    generator.generate_next_token()
    feed = {"audio_embeds": got["audio_embeds"], "audio_attention_mask": got["audio_attention_mask"].astype(bool),
            "audio_sizes": got["audio_sizes"].astype(np.int64),
            "audio_projection_mode": got["audio_projection_mode"].astype(np.int64)}  # fmt: skip
    rows = ort.InferenceSession(str(folder / "speech.onnx")).run(None, feed)[0]
    assert rows.shape == (8, H)
    logits = generator.get_output("logits")[0, -1]
    np.testing.assert_allclose(logits, rows.sum(0) @ weight, rtol=1e-4, atol=1e-4)


def test_audio_config_written():
    config = phi4_audio_config({"feature_size": 80, "hop_length": 160, "n_fft": 512, "win_length": 400})
    steps = config["feature_extraction"]["sequence"]
    assert [s["operation"]["type"] for s in steps] == ["AudioDecoderEx", "Phi4AudioEmbed"]
    assert steps[0]["operation"]["attrs"] == {"target_sample_rates": [16000], "max_samples": 0}
    attrs = steps[1]["operation"]["attrs"]
    assert (
        attrs["logmel/n_mel"] == 80
        and attrs["stft_normal/frame_length"] == 400
        and attrs["audio_compression_rate"] == 8
    )
    assert config["feature_extraction"]["output_aligner"] == "phi4-audio-aligner"


@pytest.mark.parametrize(
    ("settings", "phrase"),
    [
        ({"sampling_rate": 8000}, "sampling_rate is 8000: onnxruntime-genai's Phi4AudioEmbed computes 16000 only"),
        ({"preemphasis": 0.9}, "preemphasis is 0.9"),
        ({"mel_max_frequency": 8000}, "mel_max_frequency is 8000"),
        ({"audio_downsample_rate": 2}, "audio_downsample_rate is 2"),
    ],
)
def test_audio_config_refusals(settings, phrase):
    with pytest.raises(InputError, match=phrase):
        phi4_audio_config(settings)


def test_feature_extractor_read_from_preprocessor_config(tmp_path):
    settings = {"feature_extractor_type": "Phi4MultimodalFeatureExtractor", "feature_size": 80}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(settings))
    assert feature_extractor(tmp_path) == settings


@pytest.mark.parametrize(
    ("audio", "features", "phrase"),
    [
        ({}, {}, "audio_token_id 301: onnxruntime-genai's phi4mm processor expands 200011 only"),
        ({"audio_token_id": 200011}, {"audio_compression_rate": 4}, "audio_compression_rate 4 differs"),
    ],
)
def test_speech_dims_refusals(checkpoint, audio, features, phrase):
    from types import SimpleNamespace

    from gqa_export.source.weights import WeightStore

    with pytest.raises(InputError, match=phrase):
        phi4mm_speech_dims(phi4_config(**audio), SimpleNamespace(hidden_size=H), WeightStore.open(checkpoint),
                           {"feature_size": MEL, **features})  # fmt: skip


def test_speech_dims_read(checkpoint):
    from types import SimpleNamespace

    from gqa_export.source.weights import WeightStore

    dims = phi4mm_speech_dims(phi4_config(audio_token_id=200011), SimpleNamespace(hidden_size=H),
                              WeightStore.open(checkpoint), {"feature_size": MEL})  # fmt: skip
    assert (dims.mel, dims.layers, dims.halvings, dims.text_hidden, dims.input_norm) == (MEL, 2, 3, H, True)
    assert dims.encoder == "model.embed_tokens_extend.audio_embed.encoder."
