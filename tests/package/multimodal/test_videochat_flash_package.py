"""VideoChat-Flash's full videochat_flash_qwen package on images (recipes/videochat_flash_qwen.yaml,
graph/encoders/umt_tome.py, docs/coverage.md §36): a tiny release (tests/videochat_models.py) built by default;
genai's processor on two images, its vision model's features = the remote code's image path (UMT blocks, ToMe to
64 tokens, projector; written in torch), greedy genai tokens = Qwen2ForCausalLM's on the same ids with those
features in the <|image_pad|> rows; mutants of the merge; the towers and settings genai cannot run refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx_ir as ir
import pytest
from reference import OrtStepper, assert_varied, genai_media_greedy, hf_embeds_then_greedy, hf_model
from videochat_models import IMAGE_PAD, MARKER, frame_table, image_features, release_tensors, save_videochat_twins

from gqa_export.errors import InputError
from gqa_export.graph.encoders import umt_tome
from gqa_export.graph.params import Params
from gqa_export.pipeline import BuildOptions, build
from gqa_export.source.weights import WeightStore

NEW = 12


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("videochat_package")
    twin, release = save_videochat_twins(root)
    build(BuildOptions(str(release), root / "pkg", smoke=False))
    rng, images = np.random.default_rng(0), []
    for i, (w, h) in enumerate([(300, 200), (260, 240)]):  # both resized down (genai's Resize = PIL's there, §36)
        images.append(root / f"{i}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(images[-1])
    arrays, tokens = genai_media_greedy(root / "pkg", f"Look at {MARKER} and {MARKER} now.", NEW, ("pixel_values",),
                                        images)  # fmt: skip
    return twin, release, root / "pkg", images, arrays, tokens


def _hf(twin, ids, features):
    """Qwen2ForCausalLM on the twin's weights with `features` in the <|image_pad|> rows: (prompt logits, greedy
    tokens through its cache, EOS suppressed)."""
    import torch

    model, ids = hf_model(twin), torch.from_numpy(ids.astype(np.int64))
    with torch.no_grad():
        embeds = model.model.embed_tokens(ids)
        embeds[ids == IMAGE_PAD] = torch.from_numpy(features)
    return hf_embeds_then_greedy(model, embeds, NEW)


def _vision(release, pixels, dtype=ir.DataType.FLOAT, **changes):
    """vision.onnx's features on `pixels` [1, N, 3, S, S] in float32, its dims changed by `changes` (mutants)."""
    import onnxruntime as ort

    from gqa_export.graph.encoders.umt_tome import UmtDims

    store = WeightStore.open(release)
    model = umt_tome.build_umt_tome(dataclasses.replace(UmtDims(128, 2, 224, 16, 64), **changes),
                                    Params(store, dtype))  # fmt: skip
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixels})[0].astype(np.float32)


def test_genai_videochat_matches_the_remote_codes_image_path(built):
    """genai's processor + vision + embedding + decoder: 2 x 64 placeholders; features and prompt logits within 1e-4 of
    the remote code's (measured 5.3e-6 and 2.3e-5), greedy tokens equal and varied."""
    import onnxruntime as ort

    twin, release, package, _, arrays, tokens = built
    ids = arrays["input_ids"].astype(np.int64)
    assert int((ids == IMAGE_PAD).sum()) == 128 and arrays["pixel_values"].shape == (1, 2, 3, 224, 224)
    features = image_features(release_tensors(release), arrays["pixel_values"][0])
    prompt_logits, ref = _hf(twin, ids, features)
    vision = ort.InferenceSession(str(package / "vision.onnx"), providers=["CPUExecutionProvider"])
    got = vision.run(None, {"pixel_values": arrays["pixel_values"]})[0]
    assert np.abs(got - features).max() < 1e-4
    embedding = ort.InferenceSession(str(package / "embedding.onnx"), providers=["CPUExecutionProvider"])
    embeds = embedding.run(None, {"input_ids": ids, "image_features": got})[0]
    logits = OrtStepper(package, ids.shape[1] + 4).step(ids[0].tolist(), {"inputs_embeds": embeds})
    np.testing.assert_allclose(logits, prompt_logits, atol=1e-4, rtol=1e-4)
    assert tokens == ref
    assert_varied([tokens])
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert (model["type"], model["vision"]["num_visual_tokens"], model["image_token_id"]) == (
        "videochat_flash_qwen", 64, IMAGE_PAD)  # fmt: skip


def test_processor_is_the_remote_codes_on_downsized_images(built):
    """genai's pixels = the remote code's UMTImageProcessor (PIL bicubic to 224, 1/255, ImageNet mean/std)."""
    from PIL import Image
    from transformers.image_transforms import normalize, rescale, resize
    from transformers.image_utils import ChannelDimension, PILImageResampling

    _, _, _, images, arrays, _ = built
    first = ChannelDimension.FIRST
    for k, path in enumerate(images):
        x = resize(np.asarray(Image.open(path).convert("RGB")), (224, 224), PILImageResampling.BICUBIC,
                   data_format=first)  # fmt: skip
        x = normalize(rescale(x, 1 / 255, data_format=first), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                      data_format=first)  # fmt: skip
        assert np.abs(arrays["pixel_values"][0, k] - x).max() < 1e-5


@pytest.mark.parametrize(
    "mutant",
    [
        "sizes_dropped",  # each round's average unweighted by how many tokens a merged one holds
        "worst_first",  # the a tokens sorted worst match first: the wrong ones merged, kept in the wrong order
        "all_heads",  # the metric over the whole width, not averaged over the 16 heads' slices
    ],
)
def test_merge_mutants_fail(built, mutant, monkeypatch):
    _, release, _, _, arrays, _ = built
    pixels = arrays["pixel_values"]
    want = image_features(release_tensors(release), pixels[0])
    if mutant == "sizes_dropped":
        merge = umt_tome._merge_round
        monkeypatch.setattr(umt_tome, "_merge_round", lambda b, x, size, *rest: merge(b, x, None, *rest))
        got = _vision(release, pixels)
    elif mutant == "worst_first":
        monkeypatch.setattr(umt_tome, "BEST_FIRST", 0)
        got = _vision(release, pixels)
    else:
        merge = umt_tome._merge_round
        monkeypatch.setattr(umt_tome, "_merge_round",
                            lambda b, x, size, r, dims, dtype: merge(b, x, size, r, dataclasses.replace(dims, heads=1),
                                                                     dtype))  # fmt: skip
        got = _vision(release, pixels)
    assert np.abs(got - want).max() > 1e-2


def test_fp16_tower_runs_on_cpu(built):
    """At fp16 the merge's sums are taken in float32 (onnxruntime's CPU ScatterElements adds float32 only): the
    graph runs on CPU, its rows near float32's but where fp16 scores flip a merge (measured: 2 rows of 128 off by
    0.29 and 0.37, the rest within 6e-3)."""
    _, release, _, _, arrays, _ = built
    want = image_features(release_tensors(release), arrays["pixel_values"][0])
    rows = np.abs(_vision(release, arrays["pixel_values"], ir.DataType.FLOAT16) - want).max(axis=1)
    assert (rows > 1e-2).sum() <= 4 and np.median(rows) < 5e-3


def test_frame_table_resized_as_the_remote_code(built):
    """448-pixel frames (`umt-hd`): the 14 x 14 sine table resized bicubically to 28 x 28 as torch's interpolate."""
    from gqa_export.graph.encoders.umt_tome import UmtDims, position_table

    assert np.abs(position_table(UmtDims(128, 2, 448, 16, 64)) - frame_table(28, 128).numpy()).max() < 1e-6
    assert np.abs(position_table(UmtDims(128, 2, 224, 16, 64)) - frame_table(14, 128).numpy()).max() == 0


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"mm_vision_tower": "internvideo2"}, "InternVideo2 is not"),
        ({"mm_llm_compress": True}, "mm_llm_compress drops image tokens"),
        ({"mm_patch_merge_type": "spatial_unpad"}, "image_newline"),
    ],
)
def test_what_genai_cannot_run_is_refused(built, change, said):
    from transformers import Qwen2Config

    release = built[1]
    config = Qwen2Config(**{**json.loads((release / "config.json").read_text()), **change})
    with pytest.raises(InputError, match=said):
        umt_tome.umt_dims(config, 64, WeightStore.open(release))
