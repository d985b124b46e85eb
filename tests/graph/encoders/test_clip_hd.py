"""Phi-3-vision's image tower (gqa_export/graph/encoders/clip_hd.py) against transformers' CLIPVisionModel and the
remote code's HD transform written here in torch: hidden_states[-2] without the class token, 2 x 2 blocks merged
into channels, a sub_GN column per row of the crops' grid and of the global view, the blocks joined in
hd_transform_order with glb_GN between, Linear-GELU-Linear."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

from gqa_export.graph.encoders import clip_hd
from gqa_export.graph.encoders.clip_hd import ClipHdDims, build_clip_hd
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

PREFIX = "model.vision_embed_tokens."
D, TEXT, S = 16, 32, 336
# a 2 x 2 image, a 1 x 2 one, a 2 x 1 one: 5 crop slots each (the global view, up to 4 crops, zeros after)
SIZES = np.array([[672, 672], [336, 672], [672, 336]], np.int64)


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    import torch
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(0)
    config = CLIPVisionConfig(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=3, num_attention_heads=2,
                              image_size=S, patch_size=14, hidden_act="quick_gelu")  # fmt: skip
    clip = CLIPVisionModel(config).eval()
    with torch.no_grad():  # random norms, biases and a class token far from 0 test the wiring
        for name, param in clip.named_parameters():
            if "norm" in name or name.endswith(".bias") or "class_embedding" in name:
                param.add_(torch.randn_like(param) * 0.3)
    extra = {
        "glb_GN": torch.randn(1, 1, 4 * D),
        "sub_GN": torch.randn(1, 1, 1, 4 * D),
        "img_projection.0.weight": torch.randn(TEXT, 4 * D) * 0.2,
        "img_projection.0.bias": torch.randn(TEXT) * 0.1,
        "img_projection.2.weight": torch.randn(TEXT, TEXT) * 0.2,
        "img_projection.2.bias": torch.randn(TEXT) * 0.1,
    }
    tensors = {f"{PREFIX}img_processor.vision_model.{k}": v.contiguous() for k, v in clip.state_dict().items()}
    tensors.update({PREFIX + k: v for k, v in extra.items()})
    folder = tmp_path_factory.mktemp("clip_hd")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    dims = ClipHdDims(hidden=D, heads=2, layers=2, crop=S, patch=14, eps=config.layer_norm_eps, text_hidden=TEXT)
    rng = np.random.default_rng(1)
    pixels = rng.standard_normal((len(SIZES), 5, 3, S, S)).astype(np.float32)
    for n, (h, w) in enumerate(SIZES // S):
        pixels[n, 1 + h * w :] = 0.0  # the processor's zero crops
    return clip, extra, folder, dims, pixels


def _run(folder: Path, dims: ClipHdDims, pixels: np.ndarray, name: str = "vision") -> np.ndarray:
    import onnxruntime as ort

    path = folder / f"{name}.onnx"
    ir.save(build_clip_hd(dims, Params(WeightStore.open(folder), ir.DataType.FLOAT)), path,
            external_data=f"{name}.onnx.data")  # fmt: skip
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixels, "image_sizes": SIZES})[0]


def _reference(clip, extra, pixels: np.ndarray, order: str = "sub_glb") -> np.ndarray:
    """The remote code's Phi3ImageEmbedding (use_hd_transform) on these inputs, image after image."""
    import torch

    with torch.no_grad():
        n, c = pixels.shape[:2]
        states = clip(torch.from_numpy(pixels).flatten(0, 1), output_hidden_states=True).hidden_states[-2][:, 1:]
        b = int(states.shape[1] ** 0.5) // 2
        feats = states.reshape(n, c, b, 2, b, 2, D).permute(0, 1, 2, 4, 3, 5, 6).reshape(n, c, b, b, 4 * D)
        sub_gn, glb_gn = extra["sub_GN"].reshape(1, 4 * D), extra["glb_GN"].reshape(1, 4 * D)
        out = []
        for i, (h, w) in enumerate(SIZES // S):
            glb = torch.cat([feats[i, 0], sub_gn.expand(b, 1, 4 * D)], dim=1).reshape(-1, 4 * D)
            crops = feats[i, 1 : 1 + h * w].reshape(h, w, b, b, 4 * D).permute(0, 2, 1, 3, 4)
            sub = torch.cat([crops.reshape(h * b, w * b, 4 * D), sub_gn.expand(h * b, 1, 4 * D)], dim=1)
            sub = sub.reshape(-1, 4 * D)
            both = [sub, glb_gn, glb] if order == "sub_glb" else [glb, glb_gn, sub]
            assert sum(len(x) for x in both) == (h * w + 1) * b * b + 1 + (h + 1) * b  # the processor's count
            out.append(torch.cat(both))
        x = torch.cat(out)
        x = torch.nn.functional.gelu(x @ extra["img_projection.0.weight"].T + extra["img_projection.0.bias"])
        return (x @ extra["img_projection.2.weight"].T + extra["img_projection.2.bias"]).numpy()


@pytest.mark.parametrize("order", ["sub_glb", "glb_sub"])
def test_clip_hd_tower_matches_the_remote_code(tower, order):
    """Three images (2 x 2, 1 x 2, 2 x 1 crops) in one call, both hd_transform_order settings."""
    clip, extra, folder, dims, pixels = tower
    got = _run(folder, replace(dims, order=order), pixels, order)
    want = _reference(clip, extra, pixels, order)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-4


@pytest.mark.parametrize("mutant", ["last_layer", "columns"])
def test_clip_hd_mutants_fail_the_bound(tower, monkeypatch, mutant):
    """Mutants: the last layer's states (hidden_states[-1]); each 2 x 2 block merged column-major."""
    clip, extra, folder, dims, pixels = tower
    if mutant == "last_layer":
        dims = replace(dims, layers=3)
    else:
        transpose = clip_hd.GraphBuilder.op

        def op(self, op_type, *inputs, **attrs):
            if attrs.get("perm") == [0, 1, 3, 2, 4, 5]:
                attrs["perm"] = [0, 1, 3, 4, 2, 5]
            return transpose(self, op_type, *inputs, **attrs)

        monkeypatch.setattr(clip_hd.GraphBuilder, "op", op)
    got = _run(folder, dims, pixels, mutant)
    assert np.abs(got - _reference(clip, extra, pixels)).max() > 1e-2
