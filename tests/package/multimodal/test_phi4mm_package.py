"""Full Phi-4-multimodal packages, image side (docs/multimodal.md §15): a tiny
Phi4MultimodalForCausalLM (SigLIP over 448-pixel HD crops, NaViT positions, 2 x 2 pooling, the HD
transform and its projector; Phi-3 decoder) exported as vision.onnx + embedding.onnx + model.onnx +
processor_config.json for genai's phi4mm type, against the HF class: vision features (one crop, a
padded crop grid, three images of different grids in one call), decoder logits through embedding +
decoder, genai's processor against HF's processing, greedy generation through genai's
MultiModalProcessor with one image, two images and none, mutants of the crop order, the NaViT
positions, the padding mask and the feature layer, the refusals. One checkpoint, one package, one
genai model per module.

The ids genai's phi4mm processor hard-codes (image 200010, audio 200011) force a 200016-row vocab:
the decoder stays 32 wide so its tables stay small. The reference runs the HF class with eager
attention: under sdpa transformers 5.25's tower attends causally when no crop of the batch has
padding (its attention has is_causal=True and the all-ones mask collapses to none), bidirectionally
otherwise; eager is bidirectional always, as SigLIP and the published tower are (§15.1)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from phi4mm_models import AUDIO, HIDDEN, IMAGE, B, M, S, save_phi4mm
from phi4mm_speech_models import write_wav
from reference import genai_media_greedy

from gqa_export.errors import InputError
from gqa_export.package.phi4mm_speech import SPEECH_INPUTS
from gqa_export.pipeline import BuildOptions, build

pytest.importorskip("PIL")

NEW = 20
# per image of a vision call: (crop rows, crop columns, padded patch rows, padded patch columns)
CALLS = {
    "three": [(2, 1, 0, 7), (1, 1, 0, 0), (1, 2, 3, 4)],
    "padded": [(1, 1, 24, 0), (1, 1, 0, 28)],  # the "short" and "narrow" PNGs' masks
}
# PNG height x width: one crop; two crops; one crop of 8 unpadded patch rows (348 white pixel rows
# below: 24 masked); one crop of 4 unpadded patch columns (28 masked); resized to 746 x 448 and
# padded to two crops (10 patch columns masked); two crops of 8 unpadded rows
SIZES = {
    "square": (448, 448),
    "wide": (448, 896),
    "short": (100, 448),
    "narrow": (448, 56),
    "resized": (300, 500),
    "strip": (100, 896),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_phi4mm(tmp_path_factory.mktemp("ckpt") / "phi4mm")


@pytest.fixture(scope="module")
def built(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("pkg") / "full"
    return out, build(BuildOptions(str(checkpoint), out, smoke=False))


@pytest.fixture(scope="module")
def package(built) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def hf(checkpoint: Path):
    import torch
    import transformers as tf

    model = tf.Phi4MultimodalForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def genai(package: Path):
    import onnxruntime_genai as og

    return og.Model(str(package))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from PIL import Image

    folder, rng, made = tmp_path_factory.mktemp("images"), np.random.default_rng(3), {}
    for name, (h, w) in SIZES.items():
        made[name] = folder / f"{name}.png"
        # smooth-ish content: two resizes of noise differ by rounding alone
        base = rng.integers(0, 256, (max(h // 8, 2), max(w // 8, 2), 3), dtype=np.uint8)
        Image.fromarray(base).resize((w, h), Image.BILINEAR).save(made[name])
    return made


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 0.6 s clip (58 frames, 8 rows) for the speech model."""
    t = np.arange(9600) / 16000
    tone = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(4).standard_normal(9600)
    return write_wav(tmp_path_factory.mktemp("audio") / "clip.wav", tone)


def crop_inputs(layouts: list[tuple[int, int, int, int]], seed: int = 1, s: int = S) -> tuple[np.ndarray, ...]:
    """Random crops as HF's processor lays them out: pixel_values [N, C, 3, S, S] (the global view,
    the crops row-major, zero crops up to C), image_sizes [N, 2], image_attention_mask [N, C, M, M]
    (the padded patch rows / columns 0 across the crop grid, padding crops all 1)."""
    rng, m = np.random.default_rng(seed), s // 14
    crops = 1 + max(h * w for h, w, _, _ in layouts)
    pixels = np.zeros((len(layouts), crops, 3, s, s), np.float32)
    mask = np.ones((len(layouts), crops, m, m), np.float32)
    sizes = np.array([(h * s, w * s) for h, w, _, _ in layouts], np.int64)
    for i, (h, w, rows, cols) in enumerate(layouts):
        pixels[i, : 1 + h * w] = rng.uniform(-1, 1, (1 + h * w, 3, s, s))
        grid = np.ones((h * m, w * m), np.float32)
        grid[h * m - rows :] = 0
        grid[:, w * m - cols :] = 0
        mask[i, 1 : 1 + h * w] = grid.reshape(h, m, w, m).transpose(0, 2, 1, 3).reshape(-1, m, m)
    return pixels, sizes, mask


def token_count(sizes: np.ndarray, mask: np.ndarray) -> list[int]:
    """HF's num_img_tokens per image: 256 + 1 + kept pooled features + kept pooled rows + 16."""
    counts, crop = [], mask.shape[-1] * 14
    for i, (h, w) in enumerate(sizes // crop):
        grid = mask[i, 1 : 1 + h * w, ::2, ::2].reshape(h, w, B, B).transpose(0, 2, 1, 3).reshape(h * B, w * B)
        counts.append(B * B + 1 + int(grid.sum()) + int(grid[:, 0].sum()) + B)
    return counts


def hf_features(hf, pixels: np.ndarray, sizes: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """HF's Phi4MultimodalImageEmbedding on the inputs: its features scattered over a prompt of placeholders."""
    import torch

    total = sum(token_count(sizes, mask))
    ids = torch.full((1, total), hf.config.vision_config.image_token_id)
    with torch.no_grad():
        tensors = (torch.from_numpy(v) for v in (pixels, sizes, mask))
        out = hf.model.embed_tokens_extend.image_embed(ids, torch.zeros(1, total, HIDDEN), *tensors)
    return out[0].numpy()


def _vision(graph: Path, layouts: list[tuple[int, int, int, int]], s: int = S) -> tuple[np.ndarray, tuple]:
    import onnxruntime as ort

    inputs = crop_inputs(layouts, s=s)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    feed = dict(zip(("pixel_values", "image_sizes", "image_attention_mask"), inputs, strict=True))
    return session.run(None, feed)[0], inputs


def test_package_files_and_config(package, built):
    assert any("global view" in note and "§15.3" in note for note in built[1].notes)
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "phi4mm" and model["image_token_id"] == IMAGE
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values", "image_sizes": "image_sizes",
                                         "attention_mask": "image_attention_mask"}  # fmt: skip
    # the checkpoint's audio_config: the speech model, its feature extraction, the audio rows into the embedding
    assert model["speech"]["filename"] == "speech.onnx" and model["audio_token_id"] == AUDIO
    assert model["speech"]["inputs"] == dict(SPEECH_INPUTS)
    assert model["speech"]["config_filename"] == "audio_processor_config.json"
    assert (package / "speech.onnx").is_file() and (package / "audio_processor_config.json").is_file()
    assert model["embedding"]["inputs"] == {
        "input_ids": "input_ids",
        "image_features": "image_features",
        "audio_features": "audio_features",
    }
    assert "input_ids" not in model["decoder"]["inputs"]  # causal image runs: inputs_embeds alone, GQA
    assert json.loads((package / "manifest.json").read_text())["options"]["attention"] == "gqa"
    processor = json.loads((package / "processor_config.json").read_text())["processor"]
    ops = [t["operation"] for t in processor["transforms"]]
    kinds = ["DecodeImage", "Phi4VisionDynamicPreprocess", "Rescale", "Normalize", "Phi4VisionProcessor"]
    assert [op["type"] for op in ops] == kinds and processor["output_aligner"] == "phi4-vision-aligner"
    assert ops[1]["attrs"] == {"dynamic_hd": 4, "dyhd_base_resolution": S} and ops[2]["inputs"] == [":0"]


@pytest.fixture(scope="module")
def three(hf) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The three-image call's inputs and HF's features for them (the vision test's and the mutants')."""
    inputs = crop_inputs(CALLS["three"])
    return inputs, hf_features(hf, *inputs)


def test_vision_matches_hf_image_features(package, hf, three):
    for case, layouts in CALLS.items():
        got, inputs = _vision(package / "vision.onnx", layouts)
        ref = three[1] if case == "three" else hf_features(hf, *inputs)
        assert got.shape == ref.shape == (sum(token_count(*inputs[1:])), HIDDEN)
        print(f"{case}: max |diff| {np.abs(got - ref).max():.3g} (values to {np.abs(ref).max():.3g})")
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _crops_transposed(monkeypatch):
    from gqa_export.graph.encoders import hd_crops

    monkeypatch.setattr(hd_crops, "CROP_ORDER", "columns")


def _positions_unpadded(monkeypatch):
    """Every crop's patches numbered as if it had no padding (positions by the patch grid alone)."""
    from gqa_export.graph.encoders import hd_crops

    buckets = hd_crops._navit_buckets
    ones = lambda b, mask: b.op("Add", b.op("Mul", mask, b.const(np.float32(0), "z")), b.const(np.float32(1), "o"))  # noqa: E731
    monkeypatch.setattr(hd_crops, "_navit_buckets", lambda b, mask, side: buckets(b, ones(b, mask), side))


def _padding_attended(monkeypatch):
    from gqa_export.graph.encoders import hd_crops

    key_bias = hd_crops.key_bias
    ones = lambda b, mask: b.op("Add", b.op("Mul", mask, b.const(np.float32(0), "z")), b.const(np.float32(1), "o"))  # noqa: E731
    monkeypatch.setattr(hd_crops, "key_bias", lambda b, mask, dtype: key_bias(b, ones(b, mask), dtype))


def _vision_graph(checkpoint: Path, out: Path, extra_layers: int = 0) -> Path:
    import transformers as tf

    from gqa_export.graph.encoders.hd_crops import build_hd_crops, hd_crop_dims
    from gqa_export.graph.params import Params
    from gqa_export.source.weights import WeightStore

    store = WeightStore.open(checkpoint)
    dims = hd_crop_dims(tf.AutoConfig.from_pretrained(checkpoint), HIDDEN, store)
    dims = replace(dims, layers=dims.layers + extra_layers)
    ir.save(build_hd_crops(dims, Params(store, ir.DataType.FLOAT)), out, external_data=f"{out.name}.data")
    return out


@pytest.mark.parametrize("mutate", [_crops_transposed, _positions_unpadded, _padding_attended, "last_layer"])
def test_mutant_vision_fails(checkpoint, three, tmp_path, monkeypatch, mutate):
    """Each crop's pooled grid read transposed, the NaViT positions of padded crops taken from the
    unpadded grid, the padding patches attended, the tower's last layer read instead of
    feature_layer -2: each leaves the 1e-4 bound on the three-image call."""
    if callable(mutate):
        mutate(monkeypatch)
    graph = _vision_graph(checkpoint, tmp_path / "v.onnx", extra_layers=int(mutate == "last_layer"))
    diff = np.abs(_vision(graph, CALLS["three"])[0] - three[1]).max()
    print(f"{getattr(mutate, '__name__', mutate)}: max |diff| {diff:.3g}")
    assert diff > 1e-2


@pytest.mark.parametrize("side", [31, 32])
def test_navit_buckets_are_hfs_for_every_crop_height(side):
    """The graph's bucket table is HF's float32 bucketize of i · (1/n) for every unpadded count n
    (onnxruntime rewrites that product as i / n, which moves a 31-patch crop's 17th row to bucket 17)."""
    import torch

    from gqa_export.graph.encoders.hd_crops import navit_table

    table, bounds = navit_table(side), torch.arange(1 / side, 1.0, 1 / side)
    for n in range(1, side + 1):
        frac = torch.clamp(torch.arange(side, dtype=torch.float32) * (1.0 / torch.tensor([n])), max=1 - 1e-6)
        np.testing.assert_array_equal(torch.bucketize(frac, bounds, right=True).numpy(), table[n])
    if side == 31:  # i · fl(1/31) falls below some boundaries i / 31 (rows 17, 21, 25, 29)
        assert (table[31] != np.arange(31)).sum() == 4


def test_odd_patch_grid_pads_by_reflection(tmp_path, monkeypatch):
    """434-pixel crops: a 31 x 31 patch grid, which HF pads by one reflected row and column to pool
    16 x 16 (the count genai's processor also makes for them); the graph matches HF's features on
    padded crops in one call, and the edge repeated instead of reflected fails the bound."""
    import torch
    import transformers as tf

    from gqa_export.graph.encoders import hd_crops

    checkpoint = save_phi4mm(tmp_path / "odd", crop=434, vocab=512)
    model = tf.Phi4MultimodalForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="eager")
    layouts = [(1, 2, 3, 4), (1, 1, 0, 0)]
    ref = hf_features(model.eval(), *crop_inputs(layouts, s=434))
    got = _vision(_vision_graph(checkpoint, tmp_path / "v.onnx"), layouts, s=434)[0]
    print(f"31 x 31 grid: max |diff| {np.abs(got - ref).max():.3g}")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(hd_crops, "ODD_PAD", "edge")
    edge = _vision(_vision_graph(checkpoint, tmp_path / "e.onnx"), layouts, s=434)[0]
    print(f"edge padding: max |diff| {np.abs(edge - ref).max():.3g}")
    assert np.abs(edge - ref).max() > 1e-2


def _image_inputs(inputs: tuple[np.ndarray, ...]) -> dict:
    import torch

    names = ("image_pixel_values", "image_sizes", "image_attention_mask")
    return {name: torch.from_numpy(value) for name, value in zip(names, inputs, strict=True)}


KEEP = 16  # the prompt's last positions compared: [S, 200016] logits of a 1300-token prompt are 1 GB


def ort_logits(package: Path, prompt: list[int], features: np.ndarray | None, steps: int) -> tuple[np.ndarray, list]:
    """embedding.onnx over the prompt (its features on the prompt, 0 rows after), model.onnx fed
    the embeds in 128-token chunks through the KV cache (a chunk's logits dropped but the last
    KEEP positions'), then `steps` greedy tokens: (logits [KEEP + steps, V], tokens)."""
    import onnxruntime as ort
    from reference import OrtStepper

    embedding, decoder = ort.InferenceSession(str(package / "embedding.onnx")), OrtStepper(package, len(prompt) + 8)

    def embed(ids: list[int], rows: np.ndarray | None) -> np.ndarray:
        none = np.zeros((0, HIDDEN), np.float32)
        feed = {"input_ids": np.array([ids], np.int64), "image_features": none if rows is None else rows}
        return embedding.run(None, {**feed, "audio_features": none})[0]

    embeds, kept = embed(prompt, features), []
    for a in range(0, len(prompt), 128):
        logits = decoder.step(prompt[a : a + 128], {"inputs_embeds": embeds[:, a : a + 128]})
        kept = [*kept, logits][-2:]
    logits, tokens = [np.concatenate(kept)[-KEEP:]], []
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        logits.append(decoder.step(tokens[-1:], {"inputs_embeds": embed(tokens[-1:], None)}))
    return np.concatenate(logits), tokens


def hf_logits(hf, prompt: list[int], tokens: list[int], inputs: tuple[np.ndarray, ...] | None) -> np.ndarray:
    """The HF class's logits of the prompt's last KEEP positions (its pixels on the prompt), then of
    each of `tokens` through its cache."""
    import torch

    extra = {} if inputs is None else _image_inputs(inputs)
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), use_cache=True, logits_to_keep=KEEP, **extra)
        logits, past = [out.logits[0].numpy()], out.past_key_values
        for token in tokens:
            out = hf(torch.tensor([[token]]), past_key_values=past, use_cache=True)
            logits.append(out.logits[0].numpy())
            past = out.past_key_values
    return np.concatenate(logits)[-(len(tokens) + min(KEEP, len(prompt))) :]


@pytest.mark.parametrize("case", ["two_images", "text", "one_token"])
def test_decoder_logits_match_hf(package, hf, case):
    """The prompt's last 16 positions + 6 decode steps within 1e-4 of the HF class: two images of
    different crop grids (their features from vision.onnx in one call), a text prompt, a 1-token prompt."""
    layouts = CALLS["padded"]
    first, second = token_count(*crop_inputs(layouts)[1:])
    prompt = {
        "two_images": [17, 45, *[IMAGE] * first, 99, *[IMAGE] * second, 200, 3, 64, 12, 7, 99, 45, 17, 3],
        "text": [17, 45, 99, 200, 3, 7, 64, 12],
        "one_token": [0],
    }[case]
    features, inputs = _vision(package / "vision.onnx", layouts) if case == "two_images" else (None, None)
    got, tokens = ort_logits(package, prompt, features, 6)
    ref = hf_logits(hf, prompt, tokens, inputs)
    print(f"{case}: max |diff| {np.abs(got - ref).max():.3g}")
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def hf_processed(path: Path) -> dict[str, np.ndarray]:
    """HF's Phi4MultimodalImageProcessor rebuilt from its code (torchvision, which it needs, is not
    in the test environment) for an image within the crop budget: resized into the crop grid with
    torch's antialiased bilinear on uint8 (what torchvision's resize calls), padded white, masked,
    rescaled + normalized, the global view by bicubic interpolation without antialiasing, the
    crops row-major."""
    import torch
    from PIL import Image

    image = torch.from_numpy(np.array(Image.open(path).convert("RGB"))).permute(2, 0, 1)
    height, width = image.shape[1:]
    w, h = -(-width // S), -(-height // S)
    if S * w / width < S * h / height:
        size, pad = (int(height * S * w / width), S * w), (0, S * h - int(height * S * w / width))
    else:
        size, pad = (S * h, int(width * S * h / height)), (S * w - int(width * S * h / height), 0)
    resized = torch.nn.functional.interpolate(image[None], size=size, mode="bilinear", antialias=True)[0]
    image = (torch.nn.functional.pad(resized, (0, pad[0], 0, pad[1]), value=255).float() / 255 - 0.5) / 0.5
    view = torch.nn.functional.interpolate(image[None], size=(S, S), mode="bicubic", align_corners=False)
    crops = image.reshape(3, h, S, w, S).permute(1, 3, 0, 2, 4).reshape(-1, 3, S, S)
    grid = np.ones((h * M, w * M), np.float32)
    grid[:, grid.shape[1] - pad[0] // 14 :] = 0
    grid[grid.shape[0] - pad[1] // 14 :] = 0
    mask = np.concatenate(
        [np.ones((1, M, M), np.float32), grid.reshape(h, M, w, M).transpose(0, 2, 1, 3).reshape(-1, M, M)]
    )
    sizes = np.array([[h * S, w * S]], np.int64)
    return {"pixel_values": torch.cat([view, crops])[None].numpy(), "image_sizes": sizes,
            "image_attention_mask": mask[None], "num_img_tokens": np.array(token_count(sizes, mask[None]))}  # fmt: skip


def test_processor_matches_hf_processing(genai, images):
    """genai's phi4mm processor vs HF's processing: <|image_1|> becomes num_img_tokens placeholders
    200010, image_sizes, the masks and the crops are HF's (1e-6; the resized image too: PIL's
    bilinear = torch's antialiased uint8 bilinear); the global view is HF's for one-crop images
    (padded or not) and differs for several crops (genai: PIL's antialiased bicubic, HF: torch's
    bicubic without antialiasing), pinned here."""
    import onnxruntime_genai as og

    processor = genai.create_multimodal_processor()
    drift = {}
    for name, path in images.items():
        got = processor("<|image_1|>hi", images=og.Images.open(str(path)))
        ref = hf_processed(path)
        count = int(ref["num_img_tokens"][0])
        ids = got["input_ids"].as_numpy()[0]
        assert got["num_image_tokens"].as_numpy().sum() == count and (ids == IMAGE).sum() == count
        assert ids[:count].tolist() == [IMAGE] * count
        for key in ("image_sizes", "image_attention_mask"):
            np.testing.assert_array_equal(got[key].as_numpy(), ref[key])
        pixels = got["pixel_values"].as_numpy()
        np.testing.assert_allclose(pixels[:, 1:], ref["pixel_values"][:, 1:], atol=1e-6, rtol=0)
        drift[name] = float(np.abs(pixels[:, 0] - ref["pixel_values"][:, 0]).max())
    print(f"global view |genai - HF|: {drift}")
    assert max(drift[n] for n in ("square", "short", "narrow")) < 1e-6
    assert 1e-3 < drift["wide"] < 0.05 and 0.1 < drift["resized"] < 0.5
    two = processor("<|image_1|> <|image_2|>", images=og.Images.open(str(images["short"]), str(images["narrow"])))
    np.testing.assert_array_equal(two["image_attention_mask"].as_numpy(), crop_inputs(CALLS["padded"])[2])


CASES = {
    "one_image": ("<|image_1|>Describe the quick brown fox", ["short"]),
    # a clip alone: the speech projector (genai's audio_projection_mode 2); with an image: the vision-speech one (3)
    "audio": ("<|audio_1|>Transcribe the clip", ["clip"]),
    "image_and_audio": ("<|image_1|><|audio_1|>Describe the quick brown fox", ["short", "clip"]),
    # one crop then two: genai's aligner pads the first image's crops (zero pixels, masks of ones) as HF does
    "two_images": ("Look <|image_1|> and <|image_2|> then read", ["narrow", "strip"]),
    "no_image": ("Describe the quick brown fox", []),
}


def hf_greedy(
    hf, ids: np.ndarray, inputs: tuple[np.ndarray, ...] | None, audio: dict[str, np.ndarray] | None = None
) -> list[int]:
    """HF generate's greedy search, EOS suppressed as genai's min_length does (generate's logits
    processors over the 200016-row vocab cost seconds here): the class's forward with its pixels on
    the prompt, then each token through its cache."""
    import torch

    extra, tokens = ({} if inputs is None else _image_inputs(inputs)), []
    if audio is not None:  # genai's frames, sizes and mask, as HF's forward takes them
        import torch

        extra.update(
            audio_input_features=torch.from_numpy(audio["audio_embeds"]),
            audio_embed_sizes=torch.from_numpy(audio["audio_sizes"]),
            audio_attention_mask=torch.from_numpy(audio["audio_attention_mask"]),
        )
    with torch.no_grad():
        out = hf(torch.from_numpy(ids.astype(np.int64)), use_cache=True, logits_to_keep=1, **extra)
        for _ in range(NEW):
            logits = out.logits[0, -1]
            logits[1] = -np.inf  # EOS
            tokens.append(int(logits.argmax()))
            out = hf(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return tokens


@pytest.mark.parametrize("case", CASES)
def test_genai_generate_matches_hf(genai, hf, images, clip, case):
    """genai's MultiModalProcessor + 20 greedy tokens = HF's greedy tokens on the same ids and pixels."""
    prompt, names = CASES[case]
    pictures, clips = [n for n in names if n != "clip"], [clip for n in names if n == "clip"]
    keys = ("pixel_values", "image_sizes", "image_attention_mask") if pictures else ()
    sounds = ("audio_embeds", "audio_sizes", "audio_attention_mask", "audio_projection_mode") if clips else ()
    arrays, tokens = genai_media_greedy(genai, prompt, NEW, (*keys, *sounds), [images[n] for n in pictures], clips)
    if len(pictures) == 2:
        assert arrays["pixel_values"].shape[:2] == (2, 3) and not arrays["pixel_values"][0, 2].any()
        assert arrays["image_attention_mask"][0, 2].all()
    if clips:  # the clip's rows expanded in the prompt; the projector HF picks by the image's presence
        assert (arrays["input_ids"] == AUDIO).sum() == arrays["audio_sizes"].sum() > 0
        assert arrays["audio_projection_mode"].tolist() == [3 if pictures else 2]
    audio = {k: arrays[k] for k in sounds} if clips else None
    ref = hf_greedy(hf, arrays["input_ids"], tuple(arrays[k] for k in keys) if pictures else None, audio)
    assert len(set(tokens)) > 1 and tokens == ref


def test_placeholder_without_feature_row_embeds_as_token(package, checkpoint):
    """After the prompt there are 0 feature rows: a generated 200010 / 200011 embeds as the token, as HF does."""
    import onnxruntime as ort
    from safetensors.numpy import load_file

    table = load_file(str(checkpoint / "model.safetensors"))["model.embed_tokens.weight"]
    ids = np.array([[IMAGE, 17, AUDIO]], np.int64)
    none = np.zeros((0, HIDDEN), np.float32)
    feed = {"input_ids": ids, "image_features": none, "audio_features": none}
    got = ort.InferenceSession(str(package / "embedding.onnx")).run(None, feed)[0][0]
    np.testing.assert_array_equal(got, table[ids[0]])


def test_run_inserts_the_marker_and_genai_refuses_audio(package, images, clip):
    """`run --image` puts <|image_1|> (and BOS) in front of a prompt without one, `run --audio` <|audio_1|>;
    a prompt with <|audio_1|> and no clip is refused in one line (genai's processor: more markers than clips)."""
    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    assert len(generate_with_images(package, "cpu", "Describe", [images["short"]], 4, Sampling()).tokens) == 4
    assert len(generate_with_images(package, "cpu", "Transcribe", [], 4, Sampling(), audios=[clip]).tokens) == 4
    with pytest.raises(InputError, match="Number of audio tokens exceeds the number of audios"):
        generate_with_images(package, "cpu", "<|audio_1|>Describe", [images["short"]], 4, Sampling())


@pytest.mark.parametrize(
    ("vision", "said"),
    [
        ({"image_token_id": 300}, r"writes image placeholders as id 200010.* is 300: export with --text-only"),
        ({"patch_size": 16}, r"cuts 14-pixel patches, this checkpoint's patch_size is 16: export with --text-only"),
        ({"crop_size": 336}, r"crop_size 336 / image_size 448 / patch_size 14: .* use --text-only"),
    ],
    ids=["image_token_id", "patch_size", "crop_size"],
)
def test_refusals(checkpoint, tmp_path, vision, said):
    """What genai's phi4mm processor hard-codes (placeholder 200010, 14-pixel patches) and what the
    graph does not build (crops other than the position table's size) are refused in one line,
    before any graph is written."""
    import shutil

    source = shutil.copytree(checkpoint, tmp_path / "ckpt")
    config = json.loads((source / "config.json").read_text())
    config["vision_config"].update(vision)
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=said):
        build(BuildOptions(str(source), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()


def test_split_is_refused(checkpoint, tmp_path):
    with pytest.raises(InputError, match="--attention split cannot run a full multimodal package"):
        build(BuildOptions(str(checkpoint), tmp_path / "split", smoke=False, attention="split"))
