"""Gemma-4 full packages with an audio tower (docs/multimodal.md §16): a tiny
Gemma4ForConditionalGeneration (tests/gemma4_models.py form "full", with_audio: a 2-layer
conformer over 16 log-mel bins, chunks of 4 frames) exported as speech.onnx + vision.onnx +
embedding.onnx (image and audio features) + the gemma4 decoder, against the HF class: the speech
features (and mutants of the encoder), the prompt's logits with audio, genai's feature
extraction and greedy generation = HF generate, `run --audio` and its refusals. WAV clips are
made here (a sine plus noise, 16-bit PCM through the stdlib `wave` module)."""

from __future__ import annotations

import json
import wave
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gemma4_models import FULL_FEATURES, mm_token_type_ids, save_gemma4
from reference import genai_media_greedy, hf_model, hf_prompt_then_steps, ort_embedded_greedy

from gqa_export.errors import InputError
from gqa_export.graph.encoders import clipped_linear, conformer
from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")

NEW = 12
RATE = 16000
# samples per clip: 8100 -> 50 log-mel frames (HF pads to 8192 samples: one more, masked), 13
# audio tokens in 4 chunks; 5000 -> 30 frames, 8 tokens
CLIPS = {"clip": (8100, 440.0), "short": (5000, 700.0)}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_gemma4(tmp_path_factory.mktemp("ckpt") / "gemma4_audio", "full", with_audio=True)


@pytest.fixture(scope="module")
def package(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "gemma4_audio"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    return out


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder, made = tmp_path_factory.mktemp("wav"), {}
    rng = np.random.default_rng(0)
    for name, (samples, tone) in CLIPS.items():
        t = np.arange(samples) / RATE
        x = 0.5 * np.sin(2 * np.pi * tone * t) + 0.05 * rng.standard_normal(samples)
        made[name] = folder / f"{name}.wav"
        with wave.open(str(made[name]), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(RATE)
            out.writeframes(np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16).tobytes())
    return made


def pcm(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as clip:
        return np.frombuffer(clip.readframes(clip.getnframes()), np.int16).astype(np.float32) / 32768.0


def hf_features(files: list[Path]) -> dict[str, Any]:
    """HF's Gemma4AudioFeatureExtractor: samples padded to a multiple of 128, frames masked."""
    from transformers import Gemma4AudioFeatureExtractor

    return dict(Gemma4AudioFeatureExtractor(**FULL_FEATURES)([pcm(f) for f in files], return_tensors="pt"))


def hf_audio(hf, features: dict[str, Any]) -> np.ndarray:
    """HF's get_audio_features, padding rows dropped (as Gemma4Model drops them)."""
    import torch

    with torch.no_grad():
        out = hf.model.get_audio_features(features["input_features"], features["input_features_mask"], return_dict=True)
    return out.pooler_output[out.attention_mask].numpy()


def speech_session(checkpoint: Path, hf, dims_change: dict[str, Any] | None = None, flip_kernel: bool = False):
    import onnx_ir as ir
    import onnxruntime as ort

    from gqa_export.graph.params import Params
    from gqa_export.source.weights import WeightStore

    store = WeightStore.open(checkpoint)
    dims = conformer.conformer_dims(hf.config, 64, store, FULL_FEATURES["feature_size"])
    if dims_change:
        dims = replace(dims, attention=replace(dims.attention, **dims_change))
    model = conformer.build_conformer(dims, Params(store, ir.DataType.FLOAT))
    if flip_kernel:  # mutant: the depthwise kernel read back to front
        for node in model.graph:
            if node.op_type == "Conv" and node.attributes.get("group") is not None:
                kernel = node.inputs[1].const_value.numpy()
                node.inputs[1].const_value = ir.Tensor(
                    np.ascontiguousarray(kernel[..., ::-1]), name=node.inputs[1].name
                )
    return ort.InferenceSession(ir.to_proto(model).SerializeToString())


@pytest.fixture(scope="module")
def references(hf, clips) -> list[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(speech.onnx feed, HF's features): both clips in one padded batch with HF's masks, and
    each clip unpadded with an all-true mask (what genai feeds)."""
    batch = hf_features([clips["clip"], clips["short"]])
    cases = [({"audio_embeds": batch["input_features"].numpy(),
               "input_features_mask": batch["input_features_mask"].numpy()}, hf_audio(hf, batch))]  # fmt: skip
    for name in ("clip", "short"):
        one = hf_features([clips[name]])
        valid = one["input_features_mask"][0].numpy()
        frames = one["input_features"].numpy()[:, valid]
        feed = {"audio_embeds": frames, "input_features_mask": np.ones(frames.shape[:2], bool)}
        cases.append((feed, hf_audio(hf, one)))
    return cases


def speech_error(session, references: list[tuple[dict[str, np.ndarray], np.ndarray]]) -> float:
    return max(float(np.abs(session.run(None, feed)[0] - ref).max()) for feed, ref in references)


def test_speech_matches_hf_audio_features(checkpoint, hf, references):
    """speech.onnx's graph = HF get_audio_features (+ embed_audio) within 1e-4 (3e-7 measured)."""
    assert speech_error(speech_session(checkpoint, hf), references) < 1e-4


@pytest.mark.parametrize("mutant", ["distances_reversed", "kernel_flipped", "chunk_3", "past_5"])
def test_speech_mutants_fail(checkpoint, hf, references, monkeypatch, mutant):
    """The relative-position table read in the wrong order, the depthwise kernel flipped, chunks of
    3 frames (not 4), 5 past frames of context (not 4): each leaves the bound (on the batch)."""
    change: dict[str, Any] | None = {"chunk_3": {"chunk": 3}, "past_5": {"past": 5}}.get(mutant)
    if mutant == "distances_reversed":
        original = conformer.relative_table
        monkeypatch.setattr(conformer, "relative_table", lambda shape: original(shape)[::-1].copy())
    session = speech_session(checkpoint, hf, change, flip_kernel=mutant == "kernel_flipped")
    assert speech_error(session, references[:1]) > 1e-3


def test_clipped_linears_match_hf(checkpoint, clips, tmp_path, monkeypatch):
    """Finite clipped-linear bounds in the audio tower (input ±1.5, output ±0.3; the checkpoint's
    are ±inf): within 1e-4 of HF on the batch; the graph without its clamps leaves the bound."""
    import shutil

    from safetensors.numpy import load_file, save_file

    copy = shutil.copytree(checkpoint, tmp_path / "clipped")
    for file in copy.glob("*.safetensors"):
        tensors = load_file(file)
        for name, value in tensors.items():
            if "audio_tower" in name and name.endswith(("_min", "_max")):
                bound = 1.5 if name.rsplit(".", 1)[1].startswith("input") else 0.3
                tensors[name] = np.full(value.shape, -bound if name.endswith("_min") else bound, value.dtype)
        save_file(tensors, file, metadata={"format": "pt"})
    clipped = hf_model(copy)
    batch = hf_features([clips["clip"], clips["short"]])
    feed = {
        "audio_embeds": batch["input_features"].numpy(),
        "input_features_mask": batch["input_features_mask"].numpy(),
    }
    cases = [(feed, hf_audio(clipped, batch))]
    assert speech_error(speech_session(copy, clipped), cases) < 1e-4
    monkeypatch.setattr(clipped_linear, "clamp", lambda b, x, module, side, params: x)
    assert speech_error(speech_session(copy, clipped), cases) > 1e-2


def test_audio_placeholders_without_a_row_embed_as_pad(package):
    """The k-th audio placeholder (id 10) takes audio row k where it exists; without rows (after
    the prompt, or a prompt without audio) it embeds as pad_token_id (5), as HF does."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(package / "embedding.onnx"))
    table = next(
        onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("embed_tokens.weight")
    )
    session = ort.InferenceSession(str(package / "embedding.onnx"))
    ids, none = np.array([[10, 17, 10, 7]], np.int64), np.zeros((0, 64), np.float32)
    got = session.run(None, {"input_ids": ids, "image_features": none, "audio_features": none})[0][0]
    np.testing.assert_allclose(got, table[[5, 17, 5, 5]] * np.float32(8.0), atol=1e-6)
    rows = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    got = session.run(None, {"input_ids": ids, "image_features": none, "audio_features": rows})[0][0]
    np.testing.assert_allclose(got[[0, 2, 3]], np.stack([rows[0], table[5] * 8, table[5] * 8]), atol=1e-6)


def test_mel_bins_other_than_the_tower_refused(checkpoint, hf):
    from gqa_export.source.weights import WeightStore

    with pytest.raises(InputError, match="feature_size 128 gives 128 subsampled features per frame"):
        conformer.conformer_dims(hf.config, 64, WeightStore.open(checkpoint), 128)


def test_package_config(package):
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["audio_token_id"] == 10 and model["boa_token_id"] == 9
    assert model["speech"]["filename"] == "speech.onnx"
    assert model["speech"]["config_filename"] == "audio_processor_config.json"
    assert model["speech"]["inputs"] == {"audio_embeds": "audio_embeds", "attention_mask": "input_features_mask",
                                         "audio_sizes": "audio_sizes"}  # fmt: skip
    assert model["embedding"]["inputs"]["audio_features"] == "audio_features"
    exported = json.loads((package / "manifest.json").read_text())["model"]["exported"]
    assert exported.startswith("vision tower (vision.onnx), audio tower (speech.onnx), embedding")
    steps = json.loads((package / "audio_processor_config.json").read_text())["feature_extraction"]["sequence"]
    assert [s["operation"]["type"] for s in steps] == ["AudioDecoder", "Gemma4LogMel"]
    attrs = steps[1]["operation"]["attrs"]
    assert attrs["feature_size"] == 16 and attrs["frame_length_ms"] == 20.0 and attrs["hop_length_ms"] == 10.0
    from typer.testing import CliRunner

    from gqa_export.cli import app

    result = CliRunner().invoke(app, ["inspect", str(package), "--json"])  # every model listed
    assert result.exit_code == 0, result.output
    graphs = {g["filename"]: g for g in json.loads(result.stdout)["summary"]["graphs"]}
    assert list(graphs) == ["model.onnx", "vision.onnx", "speech.onnx", "embedding.onnx"]
    assert graphs["speech.onnx"]["stage"] == "speech" and not graphs["speech.onnx"]["run_on_token_gen"]


def _ort_logits(package: Path, prompt: list[int], audio: np.ndarray, steps: int) -> tuple[np.ndarray, list[int]]:
    """embedding.onnx then model.onnx as genai steps them: audio rows on the prompt, 0 after."""
    return ort_embedded_greedy(package, prompt, {"audio_features": audio}, steps)


def test_prompt_logits_with_audio_match_hf(package, hf, clips):
    """A prompt with the clip's 13 audio placeholders (longer than a chunk and the sliding
    window) + 6 decode steps: embedding.onnx + model.onnx on speech.onnx's features vs the HF
    class on HF's input features, within 1e-4."""
    import onnxruntime as ort

    features = hf_features([clips["clip"]])
    valid = features["input_features_mask"][0].numpy()
    feed = {"audio_embeds": features["input_features"].numpy()[:, valid], "input_features_mask": valid[None, valid]}
    audio = ort.InferenceSession(str(package / "speech.onnx")).run(None, feed)[0]
    prompt = [0, 17, 45, 9, *[10] * audio.shape[0], 11, 200, 3, 64]
    got, tokens = _ort_logits(package, prompt, audio, steps=6)
    ref = hf_prompt_then_steps(hf, prompt, tokens, mm_token_type_ids=mm_token_type_ids(hf, prompt), **features)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def genai_generate(package: Path, prompt: str, images: list[Path], audio: Path | None) -> tuple[np.ndarray, dict, list]:
    names = (("audio_embeds",) if audio else ()) + (("pixel_values", "pixel_position_ids") if images else ())
    arrays, tokens = genai_media_greedy(package, prompt, NEW, names, images, [audio] if audio else [])
    return arrays.pop("input_ids").astype(np.int64), arrays, tokens


# what `run --audio CLIP --prompt "What is said"` feeds genai's processor (BOS and marker in front)
RUN_PROMPT = "<|begin_of_text|><|audio|>What is said"


@pytest.fixture(scope="module")
def greedy(package, clips) -> tuple[np.ndarray, dict, list[int]]:
    """genai's processor + greedy generation on RUN_PROMPT with the 8100-sample clip."""
    return genai_generate(package, RUN_PROMPT, [], clips["clip"])


def hf_generate_media(hf, ids: np.ndarray, **media: Any) -> list[int]:
    """HF generate on genai's expanded ids with HF's own audio features / the image's pixels."""
    import torch

    ids_t = torch.from_numpy(ids)
    with torch.no_grad():
        out = hf.generate(ids_t, attention_mask=torch.ones_like(ids_t), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW, mm_token_type_ids=mm_token_type_ids(hf, ids[0].tolist()),
                          **media)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


@pytest.fixture(scope="module")
def hf_greedy(hf, clips, greedy) -> list[int]:
    """HF generate on RUN_PROMPT's ids (genai's expansion) with HF's features of the same clip."""
    return hf_generate_media(hf, greedy[0], **hf_features([clips["clip"]]))


def test_genai_greedy_with_audio_equals_hf_generate(clips, greedy, hf_greedy):
    """genai's AudioDecoder + Gemma4LogMel give HF's log-mel frames (within 1e-5; 4.8e-7
    measured), its prompt expands the marker to HF's count of audio tokens, and its greedy tokens
    equal HF generate on the same ids with HF's own (padded, masked) features."""
    ids, extra, tokens = greedy
    features = hf_features([clips["clip"]])
    valid = features["input_features_mask"][0].numpy()
    assert features["input_features"].shape[1] == 51 and valid.sum() == 50  # HF's padding frame, masked
    assert np.abs(extra["audio_embeds"][0] - features["input_features"][0].numpy()[valid]).max() < 1e-5
    assert ids[0].tolist()[:19] == [0, 210, 210, 9, *[10] * 13, 11, 210]  # BOS, "\n\n", the block, "\n"
    assert len(set(tokens)) > 3 and tokens == hf_greedy


@pytest.mark.parametrize("prompt", ["<|image|> and <|audio|> what", "<|audio|> and <|image|> what"])
def test_genai_audio_and_an_image_together_equal_hf_generate(hf, package, clips, gemma4_png_images, prompt):
    """One prompt with an image and the clip, in either order: genai expands both blocks (70 image,
    8 audio placeholders) and its greedy tokens equal HF generate on the same ids with genai's
    pixels (HF's padded form) and HF's features of the clip."""
    from gemma4_full import padded

    ids, extra, tokens = genai_generate(package, prompt, [gemma4_png_images["exact"]], clips["short"])
    assert ids[0].tolist().count(7) == 70 and ids[0].tolist().count(10) == 8
    pixels = padded(extra["pixel_values"], extra["pixel_position_ids"])
    assert len(set(tokens)) > 3 and tokens == hf_generate_media(hf, ids, **pixels, **hf_features([clips["short"]]))


def test_genai_text_prompt_equals_hf_generate(package, hf):
    """A prompt without audio on a package with a speech model: genai gives the embedding model
    0 audio feature rows (probed) and generates HF's text-only tokens."""
    import torch

    ids, _, tokens = genai_generate(package, "<|begin_of_text|>hello what is", [], None)
    ids_t = torch.from_numpy(ids)
    with torch.no_grad():
        out = hf.generate(ids_t, attention_mask=torch.ones_like(ids_t), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW)  # fmt: skip
    assert len(set(tokens)) > 3 and tokens == out[0, ids.shape[1] :].tolist()


def _run_audio(package: Path, clip: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from gqa_export.cli import app

    args = ["run", str(package), "--audio", str(clip), "--prompt", "What is said", "--json"]
    result = CliRunner().invoke(app, [*args, "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _stream_text(package: Path, tokens: list[int]) -> str:
    """The tokens decoded as `run` streams them (onnxruntime-genai's tokenizer stream)."""
    import onnxruntime_genai as og

    stream = og.Tokenizer(og.Model(str(package))).create_stream()
    return "".join(stream.decode(token) for token in tokens)


@pytest.fixture(scope="module")
def hf_text(package, hf_greedy) -> str:
    return _stream_text(package, hf_greedy)


def test_run_with_audio_inserts_the_marker(package, clips, greedy, hf_greedy, hf_text):
    """`gqa-export run PKG --audio FILE --prompt TEXT` puts <|audio|> (after the tokenizer's BOS)
    in front of a prompt without one: the ids of RUN_PROMPT and the text of HF's tokens on them."""
    report = _run_audio(package, clips["clip"])
    assert report["prompt_tokens"] == greedy[0].shape[1] and report["new_tokens"] == len(hf_greedy) == NEW
    assert report["text"] == hf_text and len(set(hf_greedy)) > 3


def test_mutant_run_audio_marker_appended_fails(package, clips, hf_text, monkeypatch):
    """The marker put after the prompt (the same token count) gives another text than HF's."""
    from gqa_export.runtime import images

    markers = images.UNEXPORTED_MARKERS["gemma4"]
    monkeypatch.setattr(images, "audio_marker", lambda _pkg, prompt, _clips: prompt + markers[0])
    assert _run_audio(package, clips["clip"])["text"] != hf_text


@pytest.mark.parametrize(
    ("files", "prompt", "phrase"),
    [
        (["clip", "short"], "x", "one audio clip per prompt, got 2"),
        (["clip"], "<|audio|> and <|audio|>", "2 '<|audio|>' markers for one --audio"),
        (["clip"], "x", "no speech model"),
        # #34 item 11: genai's AudioDecoder raises on a file it cannot read; one line naming it
        (["README.md"], "x", "README.md: onnxruntime-genai cannot read it ([AudioDecoder]: Cannot detect audio"),
        (["empty.wav"], "x", "empty.wav: onnxruntime-genai cannot read it ([AudioDecoder]"),
    ],
)
def test_run_audio_refusals(package, gemma4_full_package, clips, files, prompt, phrase, tmp_path):
    from typer.testing import CliRunner

    from gqa_export.cli import app

    (tmp_path / "README.md").write_text("# notes\n\nnot a sound\n")
    (tmp_path / "empty.wav").write_bytes(b"")
    target = gemma4_full_package if phrase == "no speech model" else package
    args = ["run", str(target), "--prompt", prompt]
    for name in files:
        args += ["--audio", str(clips.get(name, tmp_path / name))]
    result = CliRunner().invoke(app, args)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and phrase in errors[0], result.output
