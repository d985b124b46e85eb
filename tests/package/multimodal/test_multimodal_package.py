"""Full multimodal packages (docs/multimodal.md): a tiny Gemma3ForConditionalGeneration whose
SigLIP tower pools to the 256 image tokens onnxruntime-genai's gemma3 processor writes, exported
as vision.onnx + embedding.onnx + model.onnx (inputs_embeds and input_ids) + processor_config.json,
against the HF class with images: the vision features, the decoder's logits with the image's
features (prompt and decode steps), genai's processor pixel_values and greedy generation through
genai's MultiModalProcessor, text-only prompts and two images in one prompt. The fixtures
(the gemma3_full checkpoint, its package, PNG images) are tests/conftest.py's; the commands and refusals are
tests/package/multimodal/test_multimodal_commands.py's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from gemma3_full import BOI, EOI, IMAGE, IMAGE_TOKENS, genai_generate, hf_generate, hf_pixels
from reference import OrtStepper, assert_varied, hf_model, hf_prompt_then_steps

from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")  # PNG test images and HF's image processor


# short names for the session fixtures of tests/conftest.py
@pytest.fixture(scope="module")
def checkpoint(gemma3_full_checkpoint: Path) -> Path:
    return gemma3_full_checkpoint


@pytest.fixture(scope="module")
def package(gemma3_full_package: Path) -> Path:
    return gemma3_full_package


@pytest.fixture(scope="module")
def images(png_images: dict[str, Path]) -> dict[str, Path]:
    return png_images


# an image block as genai's processor (and HF's Gemma3Processor) expands <start_of_image>
IMAGE_PROMPT = [0, 17, 45, BOI, *[IMAGE] * IMAGE_TOKENS, EOI, 99, 200, 3, 7]


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    return hf_model(checkpoint)


def test_package_files_and_config(package):
    names = {p.name for p in package.iterdir()}
    assert {"model.onnx", "vision.onnx", "embedding.onnx", "processor_config.json"} <= names
    assert {"model.onnx.data", "vision.onnx.data", "embedding.onnx.data"} <= names
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "gemma3" and model["image_token_id"] == IMAGE
    assert set(model["decoder"]["inputs"]) >= {"inputs_embeds", "input_ids", "attention_mask"}
    assert model["vision"]["filename"] == "vision.onnx" and model["embedding"]["filename"] == "embedding.onnx"
    transforms = json.loads((package / "processor_config.json").read_text())["processor"]["transforms"]
    kinds = [t["operation"]["type"] for t in transforms]
    assert kinds == ["DecodeImage", "Resize", "Rescale", "Normalize", "Permute3D"]  # no ConvertRGB: it swaps to BGR
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["options"]["attention"] == "bias" and manifest["model"]["exported"].startswith("vision tower")


def _vision(package: Path, pixels: np.ndarray, graph: Path | None = None) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph or package / "vision.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixels})[0]


def _pixels(count: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (count, 3, 64, 64)).astype(np.float32)


def _hf_features(hf, pixels: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return hf.model.get_image_features(torch.from_numpy(pixels)).pooler_output.numpy()


def test_vision_matches_hf_image_features(package, hf):
    pixels = _pixels(2)
    got, ref = _vision(package, pixels), _hf_features(hf, pixels)
    assert got.shape == (2, IMAGE_TOKENS, 64)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _scaled_copy(graph: Path, out: Path, match: str, factor: float = 1.5) -> Path:
    """The graph with every initializer whose name contains `match` scaled by `factor`."""
    model = onnx.load(str(graph))
    hits = 0
    for tensor in model.graph.initializer:
        if match in tensor.name:
            values = onnx.numpy_helper.to_array(tensor) * np.float32(factor)
            tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), tensor.name))
            hits += 1
    assert hits, match
    onnx.save(model, str(out))
    return out


@pytest.mark.parametrize(
    "match",
    [
        "position_embedding",
        "mm_soft_emb_norm",
        "layers.1.mlp.fc1.weight",
        "layers.0.self_attn.q_proj",
        "patch_embedding.bias",
    ],
)
def test_mutant_vision_weight_fails(package, hf, tmp_path, match):
    """Each mechanism of the tower (positions, the pooled tokens' norm, an MLP, the attention's
    queries, the patch conv) scaled x1.5: the features leave the 1e-4 bound."""
    pixels = _pixels(1)
    got = _vision(package, pixels, _scaled_copy(package / "vision.onnx", tmp_path / "v.onnx", match))
    assert np.abs(got - _hf_features(hf, pixels)).max() > 1e-3


class _Genai:
    """embedding.onnx then model.onnx, stepped as onnxruntime-genai runs them: features on the
    prompt, 0 feature rows on every decode step."""

    def __init__(self, package: Path, embedding: Path | None = None) -> None:
        import onnxruntime as ort

        self.embedding = ort.InferenceSession(str(embedding or package / "embedding.onnx"))
        self.decoder = OrtStepper(package, max_length=512)

    def embed(self, ids: list[int], features: np.ndarray) -> np.ndarray:
        return self.embedding.run(None, {"input_ids": np.array([ids], np.int64), "image_features": features})[0]

    def step(self, ids: list[int], features: np.ndarray | None = None) -> np.ndarray:
        features = np.zeros((0, 64), np.float32) if features is None else features
        return self.decoder.step(ids, {"inputs_embeds": self.embed(ids, features)})


def _ort_logits(
    package: Path, prompt: list[int], features: np.ndarray | None, steps: int, embedding: Path | None = None
) -> tuple[np.ndarray, list[int]]:
    run = _Genai(package, embedding)
    logits, tokens = [run.step(prompt, features)], []
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        logits.append(run.step([tokens[-1]]))
    return np.concatenate(logits), tokens


def _hf_logits(hf, prompt: list[int], pixels: np.ndarray | None, tokens: list[int]) -> np.ndarray:
    """HF's prompt logits (pixels and the image-run token_type_ids mask), then its decode steps on
    `tokens` through its cache with the plain causal mask, as generate runs them."""
    import torch

    extra = {}
    if pixels is not None:
        token_types = (np.asarray(prompt) == IMAGE).astype(np.int64)[None]
        extra = {"pixel_values": torch.from_numpy(pixels), "token_type_ids": torch.from_numpy(token_types)}
    return hf_prompt_then_steps(hf, prompt, tokens, **extra)


@pytest.mark.parametrize("case", ["image", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, case):
    """Prompt + 6 decode steps within 1e-4 of the HF class: with an image (its features and the
    bidirectional image run read from input_ids), a text prompt, a 1-token prompt."""
    pixels = _pixels(1) if case == "image" else None
    prompt = {"image": IMAGE_PROMPT, "text": [0, 17, 45, 99, 200, 3, 7, 64, 12], "one_token": [0]}[case]
    features = _vision(package, pixels) if pixels is not None else None
    got, tokens = _ort_logits(package, prompt, features, steps=6)
    np.testing.assert_allclose(got, _hf_logits(hf, prompt, pixels, tokens), atol=1e-4, rtol=1e-4)


def test_mutant_embedding_scale_fails(package, hf, tmp_path):
    """The embedding's sqrt(hidden) multiplier x1.5: the prompt's logits leave the bound."""
    mutant = _scaled_copy(package / "embedding.onnx", tmp_path / "e.onnx", "const.scale")
    pixels = _pixels(1)
    got, tokens = _ort_logits(package, IMAGE_PROMPT, _vision(package, pixels), steps=2, embedding=mutant)
    assert np.abs(got - _hf_logits(hf, IMAGE_PROMPT, pixels, tokens)).max() > 1e-2


def test_mutant_causal_image_runs_fail(checkpoint, package, hf, tmp_path):
    """The same package with the image runs attending causally (no bidirectional ids): the prompt
    with an image leaves the bound, so the decoder's input_ids mask is what makes it exact."""
    causal = tmp_path / "causal"
    build(BuildOptions(str(checkpoint), causal, smoke=False, bidirectional_ids=()))
    pixels = _pixels(1)
    got, tokens = _ort_logits(causal, IMAGE_PROMPT, _vision(package, pixels), steps=0)
    assert np.abs(got - _hf_logits(hf, IMAGE_PROMPT, pixels, tokens)).max() > 1e-2


def _table_rows(package: Path, ids: list[int]) -> np.ndarray:
    """The decoder's embedding of `ids` without features: the tied table times sqrt(hidden)."""
    model = onnx.load(str(package / "embedding.onnx"))
    table = next(t for t in model.graph.initializer if t.name.endswith("embed_tokens.weight"))
    return onnx.numpy_helper.to_array(table)[ids] * np.float32(np.sqrt(64.0))


def test_placeholders_without_a_feature_row_embed_as_tokens(package):
    """After the prompt genai passes 0 feature rows: a generated image-token id is embedded as the
    token (HF embeds it from the table), never as a zero or stale row; with rows, the k-th
    placeholder takes row k."""
    ids = [IMAGE, 17, IMAGE]
    run = _Genai(package)
    np.testing.assert_allclose(run.embed(ids, np.zeros((0, 64), np.float32))[0], _table_rows(package, ids), atol=1e-6)
    features = np.random.default_rng(2).standard_normal((1, 2, 64)).astype(np.float32)
    got = run.embed(ids, features)[0]
    np.testing.assert_allclose(got[[0, 2]], features[0], atol=0)
    np.testing.assert_allclose(got[1], _table_rows(package, [17])[0], atol=1e-6)


def test_mutant_features_on_every_placeholder_fail(checkpoint, tmp_path, monkeypatch):
    """Features scattered wherever the id is the image token (no row check): the generated
    placeholder is embedded as the zero row and the check above fails."""
    from gqa_export.graph.encoders import token_embedding

    monkeypatch.setattr(token_embedding, "placeholders_with_row", lambda b, is_image, rank, rows: is_image)
    mutant = tmp_path / "mutant"
    build(BuildOptions(str(checkpoint), mutant, smoke=False))
    ids = [IMAGE, 17]
    got = _Genai(mutant).embed(ids, np.zeros((0, 64), np.float32))[0]
    assert np.abs(got - _table_rows(mutant, ids)).max() > 0.1


CASES = {
    "resized": ("Look<start_of_image> at this", ["resized"]),
    "exact": ("Look<start_of_image> at this", ["exact"]),
    "no_image": ("Look at this", []),
    "two_images": ("A<start_of_image> and<start_of_image> b", ["resized", "exact"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_genai_generate_matches_hf(package, hf, images, case):
    """genai's processor + greedy generation = HF generate on the same ids and image: its
    pixel_values are HF's within 1e-6 (bilinear resize and none), the image block is the one
    HF's Gemma3Processor writes, the tokens are HF's and not one repeated id."""
    prompt, names = CASES[case]
    files = [images[n] for n in names]
    ids, pixels, tokens = genai_generate(package, prompt, files)
    blocks = int((ids[0] == BOI).sum())
    assert blocks == len(files) and int((ids[0] == IMAGE).sum()) == IMAGE_TOKENS * len(files)
    reference = None
    if files:
        reference = hf_pixels(files)
        np.testing.assert_allclose(pixels, reference, atol=1e-6)
    ref_tokens = hf_generate(hf, ids, reference)
    assert_varied([ref_tokens])
    assert tokens == ref_tokens


def test_nonpad_kv_read_matches_hf(checkpoint, hf, images, tmp_path):
    """The scatter graph's whole-buffer read (nonpad_kv_seqlen, what CUDA builds get), run on CPU:
    its key length comes from the first past input, found by name (inputs_embeds and input_ids
    come before it in this decoder)."""
    out = tmp_path / "nonpad"
    build(BuildOptions(str(checkpoint), out, smoke=False, settings=("attention.bias_kv_read=nonpad",)))
    ids, _, tokens = genai_generate(out, "Look<start_of_image> at this", [images["exact"]])
    assert tokens == hf_generate(hf, ids, hf_pixels([images["exact"]]))
