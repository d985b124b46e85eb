"""VideoChat-Flash as released (model_type videochat_flash_qwen, VideoChatFlashQwenForCausalLM, remote code: a
Qwen2ForCausalLM subclass; source/release_layouts.py, recipes/videochat_flash_qwen.yaml). onnxruntime-genai runs its
full package, whose InternVideo2 tower gqa-export does not build: --text-only exports its Qwen2 decoder, byte for
byte the package of the same weights saved as transformers' Qwen2ForCausalLM (whose parity with HF the registry's
qwen2 rows prove, and which is checked here once more); without the flag one line, exit 2, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

# the release's own keys beside Qwen2's (OpenGVLab/VideoChat-Flash-Qwen2-7B_res448's config.json spellings)
RELEASE_KEYS = {
    "model_type": "videochat_flash_qwen",
    "architectures": ["VideoChatFlashQwenForCausalLM"],
    "auto_map": {"AutoConfig": "modeling_videochat_flash.VideoChatFlashQwenConfig",
                 "AutoModel": "modeling_videochat_flash.VideoChatFlashQwenForCausalLM"},
    "mm_vision_tower": "internvideo2", "mm_projector_type": "tome16_mlp_hd64", "mm_hidden_size": 16,
    "mm_newline_position": "nothing", "mm_spatial_pool_mode": "bilinear", "image_aspect_ratio": "anyres_nopad",
    "mm_local_num_frames": 4, "mm_num_compress_latents": 128, "use_sliding_window": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[Path, Path]:
    """(twin, release): a random Qwen2ForCausalLM, and the same weights in the release's layout with a stand-in
    tower and projector beside them."""
    from safetensors.numpy import load_file, save_file
    from tiny_models import save_model

    root = tmp_path_factory.mktemp("videochat")
    twin = save_model(root / "twin", "qwen2")
    release = Path(shutil.copytree(twin, root / "release"))
    config = json.loads((twin / "config.json").read_text())
    (release / "config.json").write_text(json.dumps({**config, **RELEASE_KEYS}, indent=2))
    file = next(release.glob("*.safetensors"))
    tensors = load_file(file)
    tensors["model.vision_tower.vision_tower.patch_embed.proj.weight"] = tensors["model.norm.weight"][:4].copy()
    tensors["model.mm_projector.mlp.0.weight"] = tensors["model.norm.weight"][:4].copy()
    save_file(tensors, file, metadata={"format": "pt"})
    return twin, release


def test_text_only_is_the_qwen2_decoders_package(twins, tmp_path):
    twin, release = twins
    build(BuildOptions(str(twin), tmp_path / "twin", smoke=False))
    build(BuildOptions(str(release), tmp_path / "release", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (tmp_path / "release" / name).read_bytes() == (tmp_path / "twin" / name).read_bytes(), name
    assert parity_error(tmp_path / "release", twin) < 1e-4
    manifest = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert manifest["model"]["model_type"] == "videochat_flash_qwen"
    assert manifest["recipe"]["name"] == "videochat_flash_qwen"


def test_without_text_only_one_line_names_the_tower_not_built(twins, tmp_path):
    _, release = twins
    result = CliRunner().invoke(app, ["build", str(release), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (
        "VideoChatFlashQwenForCausalLM's InternVideo2 video tower and token-merging projector are not built "
        "(gqa-export does not build onnxruntime-genai's videochat_flash_qwen package); pass --text-only to export "
        "its qwen2 text decoder alone"
    ) in said
    assert not (tmp_path / "pkg").exists()
