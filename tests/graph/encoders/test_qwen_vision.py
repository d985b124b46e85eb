"""The Qwen2.5-VL vision tower graph equals HF's `model.visual(pixel_values, grid_thw)` through
onnxruntime: one graph for any grid and any number of images (docs/multimodal.md §11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest

from gqa_export.graph.encoders.qwen_vision import QwenVisionDims, build_qwen_vision, vision_prefix
from gqa_export.graph.params import Params
from gqa_export.source.weights import WeightStore

# window_size 84 with patch 14 and merge 2: windows of 3 x 3 merge blocks, so an 8 x 8 patch grid
# (4 x 4 blocks) has windows cut by its edge; blocks 0 and 2 windowed, block 1 full attention.
VISION = dict(
    model_type="qwen2_5_vl_vision", depth=3, hidden_size=32, intermediate_size=48, num_heads=2,
    out_hidden_size=64, spatial_merge_size=2, temporal_patch_size=2, patch_size=14, window_size=84,
    fullatt_block_indexes=[1], initializer_range=0.1,
)  # fmt: skip
TEXT = dict(model_type="qwen2_5_vl_text", vocab_size=384, hidden_size=64, intermediate_size=96,
            num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]})  # fmt: skip
GRIDS = {"8x8": [[1, 8, 8]], "12x16": [[1, 12, 16]], "two_images": [[1, 8, 8], [1, 12, 16]]}


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=300)
    model = tf.Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():  # HF inits norms to ones and biases to zeros: random ones test the wiring
        for name, param in model.model.visual.named_parameters():
            if "norm" in name or "ln_q" in name:
                param.add_(torch.randn_like(param) * 0.3)
            elif name.endswith(".bias"):
                param.add_(torch.randn_like(param) * 0.05)
    folder = tmp_path_factory.mktemp("qwen_vision")
    model.save_pretrained(folder)
    return model, folder


def run_graph(folder: Path, pixels: np.ndarray, grid: np.ndarray, dims: QwenVisionDims | None = None,
              model: ir.Model | None = None) -> np.ndarray:  # fmt: skip
    import json

    import onnxruntime as ort

    if model is None:
        store = WeightStore.open(folder)
        vision = json.loads((folder / "config.json").read_text())["vision_config"]
        dims = dims or QwenVisionDims.from_config(vision)
        model = build_qwen_vision(dims, Params(store, ir.DataType.FLOAT), vision_prefix(store.names()))
    path = folder / "vision.onnx"
    ir.save(model, path, external_data="vision.onnx.data")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixel_values": pixels, "image_grid_thw": grid})[0]


def inputs(grid: list[list[int]], seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rows = sum(t * h * w for t, h, w in grid)
    pixels = np.random.default_rng(seed).standard_normal((rows, 3 * 2 * 14 * 14)).astype(np.float32)
    return pixels, np.array(grid, dtype=np.int64)


def hf_features(model: Any, pixels: np.ndarray, grid: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model.model.visual(torch.from_numpy(pixels), grid_thw=torch.from_numpy(grid))
    return out.pooler_output.numpy()


@pytest.mark.parametrize("grid", list(GRIDS))
def test_vision_tower_matches_hf(tower, grid):
    model, folder = tower
    pixels, thw = inputs(GRIDS[grid])
    ours, ref = run_graph(folder, pixels, thw), hf_features(model, pixels, thw)
    assert ours.shape == ref.shape == (len(pixels) // 4, 64)
    assert np.abs(ours - ref).max() < 1e-4


def test_one_graph_serves_every_grid(tower):
    """The same graph object, run on the three grids, still matches (nothing grid-specific baked)."""
    import json

    import onnxruntime as ort

    model, folder = tower
    store = WeightStore.open(folder)
    dims = QwenVisionDims.from_config(json.loads((folder / "config.json").read_text())["vision_config"])
    ir.save(build_qwen_vision(dims, Params(store, ir.DataType.FLOAT), vision_prefix(store.names())),
            folder / "shared.onnx", external_data="shared.onnx.data")  # fmt: skip
    session = ort.InferenceSession(str(folder / "shared.onnx"), providers=["CPUExecutionProvider"])
    for grid in GRIDS.values():
        pixels, thw = inputs(grid, seed=2)
        ours = session.run(None, {"pixel_values": pixels, "image_grid_thw": thw})[0]
        assert np.abs(ours - hf_features(model, pixels, thw)).max() < 1e-4


def _mutated(folder: Path, **changes: Any) -> QwenVisionDims:
    import json

    dims = QwenVisionDims.from_config(json.loads((folder / "config.json").read_text())["vision_config"])
    return dataclasses.replace(dims, **changes)


def _swap_hw(original: Any) -> Any:
    def mutated(*args: Any) -> Any:
        grid = original(*args)
        return dataclasses.replace(grid, h=grid.w, w=grid.h)

    return mutated


def _row_major(original: Any) -> Any:
    """Rows read as row-major patches (merge 1, same window extent), not merge block by block."""
    return lambda b, px, g, merge, window_blocks: original(b, px, g, 1, merge * window_blocks)


MUTANTS: dict[str, tuple[dict[str, Any], Any]] = {
    "window": ({"window_size": 56}, None),  # windows of 2 x 2 blocks instead of 3 x 3
    "no_full": ({"fullatt_block_indexes": ()}, None),
    "no_window": ({"fullatt_block_indexes": (0, 1, 2)}, None),
    "rope_swap_hw": ({}, _swap_hw),
    "merge_order": ({}, _row_major),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_vision_mutant_breaks_parity(tower, mutant, monkeypatch):
    """Each planted change of a mechanism the graph computes moves the two-image batch's features
    a hundred times past the parity tolerance."""
    from gqa_export.graph.encoders import qwen_vision

    model, folder = tower
    changes, patch = MUTANTS[mutant]
    if patch is not None:
        monkeypatch.setattr(qwen_vision, "patch_grid", patch(qwen_vision.patch_grid))
    pixels, thw = inputs(GRIDS["two_images"])
    ours = run_graph(folder, pixels, thw, _mutated(folder, **changes))
    assert np.abs(ours - hf_features(model, pixels, thw)).max() > 1e-2


# --- Qwen3.5 / Qwen3-VL towers: learned positions, LayerNorm, fc1 -> fc2 MLP, full attention ---
QWEN3_VISION = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                    spatial_merge_size=2, temporal_patch_size=2, patch_size=16, num_position_embeddings=36,
                    initializer_range=0.1)  # fmt: skip
QWEN3_GRIDS = {"8x8": [[1, 8, 8]], "two_images": [[1, 8, 8], [1, 12, 6]]}


def _qwen3_tower(folder: Path, kind: str, deepstack: list[int]) -> Any:
    """A bare vision tower saved on its own (names without a prefix), norms and biases random."""
    import torch
    import transformers as tf
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    torch.manual_seed(1)
    if kind == "qwen3_5":
        model = Qwen3_5VisionModel(tf.Qwen3_5VisionConfig(**QWEN3_VISION))
    else:
        model = Qwen3VLVisionModel(tf.Qwen3VLVisionConfig(**QWEN3_VISION, deepstack_visual_indexes=deepstack))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                param.add_(torch.randn_like(param) * 0.3)
            if name == "pos_embed.weight":
                param.normal_()
    model.eval().save_pretrained(folder)
    return model


def _run_qwen3(model: Any, folder: Path, grid: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    import json

    import torch

    rows = sum(t * h * w for t, h, w in grid)
    pixels = np.random.default_rng(4).standard_normal((rows, 3 * 2 * 16 * 16)).astype(np.float32)
    thw = np.array(grid, dtype=np.int64)
    with torch.no_grad():
        ref = model(torch.from_numpy(pixels), grid_thw=torch.from_numpy(thw)).pooler_output.numpy()
    store = WeightStore.open(folder)
    dims = QwenVisionDims.from_config(json.loads((folder / "config.json").read_text()))
    graph = build_qwen_vision(dims, Params(store, ir.DataType.FLOAT), vision_prefix(store.names()))
    return run_graph(folder, pixels, thw, model=graph), ref


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_vl"])
@pytest.mark.parametrize("grid", list(QWEN3_GRIDS))
def test_qwen3_towers_match_hf(tmp_path, kind, grid):
    """Qwen3.5's tower, and Qwen3-VL's without deepstack mergers: the same graph mechanisms."""
    model = _qwen3_tower(tmp_path, kind, [])
    ours, ref = _run_qwen3(model, tmp_path, QWEN3_GRIDS[grid])
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() < 1e-4


def test_qwen3_position_table_mutant_breaks_parity(tmp_path, monkeypatch):
    """Each patch's table sample taken one row and one column off (index + 1 over size + 1) moves
    the features past 1e-2."""
    from gqa_export.graph.encoders import position_table

    original = position_table._axis

    def half_pixel(b: Any, index: Any, size: Any, side: int, name: str) -> Any:
        shifted = b.op("Add", index, b.const(1, f"{name}_shift", "int64"))
        return original(b, shifted, b.op("Add", size, b.const(1, f"{name}_grow", "int64")), side, name)

    monkeypatch.setattr(position_table, "_axis", half_pixel)
    model = _qwen3_tower(tmp_path, "qwen3_5", [])
    ours, ref = _run_qwen3(model, tmp_path, QWEN3_GRIDS["two_images"])
    assert np.abs(ours - ref).max() > 1e-2


def test_deepstack_tower_widens_its_rows_like_hf(tmp_path):
    """Qwen3-VL's deepstack tower (docs/multimodal.md §11.5): each image token's row is the main
    merger's features followed by each deepstack merger's (HF's pooler_output and
    deepstack_features); without its deepstack blocks the graph keeps the main features only."""
    import json

    import torch

    model = _qwen3_tower(tmp_path, "qwen3_vl", [0])
    grid = QWEN3_GRIDS["two_images"]
    rows = sum(t * h * w for t, h, w in grid)
    pixels = np.random.default_rng(4).standard_normal((rows, 3 * 2 * 16 * 16)).astype(np.float32)
    thw = np.array(grid, dtype=np.int64)
    with torch.no_grad():
        out = model(torch.from_numpy(pixels), grid_thw=torch.from_numpy(thw))
    ref = np.concatenate([out.pooler_output.numpy(), *(f.numpy() for f in out.deepstack_features)], axis=-1)
    store = WeightStore.open(tmp_path)
    dims = QwenVisionDims.from_config(json.loads((tmp_path / "config.json").read_text()))
    params, prefix = Params(store, ir.DataType.FLOAT), vision_prefix(store.names())
    ours = run_graph(tmp_path, pixels, thw, model=build_qwen_vision(dims, params, prefix, (0,)))
    assert ours.shape == ref.shape and np.abs(ours - ref).max() < 1e-4
    main = run_graph(tmp_path, pixels, thw, model=build_qwen_vision(dims, params, prefix))
    assert np.abs(main - out.pooler_output.numpy()).max() < 1e-4
    late = run_graph(tmp_path, pixels, thw, model=build_qwen_vision(dims, params, prefix, (1,)))
    assert np.abs(late - ref).max() > 1e-2  # mutant: the merger reads the block after its own


def test_published_qwen2_vl_vision_config_reads():
    """Qwen2-VL-7B's published vision_config (no hidden_act, in_chans, embed_dim the width and
    hidden_size the merger's output): QuickGELU, its config class's default; no windows."""
    published = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                 "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                 "temporal_patch_size": 2}  # fmt: skip
    dims = QwenVisionDims.from_config(published)
    assert (dims.hidden_size, dims.out_hidden_size, dims.hidden_act) == (1280, 3584, "quick_gelu")
    assert dims.window_blocks == 0
    assert (dims.head_dim, dims.patch_dim) == (80, 3 * 2 * 14 * 14)
