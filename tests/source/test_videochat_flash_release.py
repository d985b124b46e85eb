"""VideoChat-Flash as released (model_type videochat_flash_qwen, VideoChatFlashQwenForCausalLM, remote code: a
Qwen2ForCausalLM subclass; source/release_layouts.py, recipes/videochat_flash_qwen.yaml). By default genai's
videochat_flash_qwen package on images (tests/package/multimodal/test_videochat_flash_package.py); --text-only exports
its Qwen2 decoder, byte for byte the package of the same weights saved as transformers' Qwen2ForCausalLM (whose parity
with HF the registry's qwen2 rows prove, and which is checked here once more); a tower the package does not build
(the remote code's SigLIP branch) is refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json

import pytest
from reference import parity_error
from typer.testing import CliRunner
from videochat_models import save_videochat_twins

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """(twin, release): a random Qwen2ForCausalLM, and the same weights in the release's layout with a tiny UMT
    tower and projector beside them."""
    return save_videochat_twins(tmp_path_factory.mktemp("videochat"))


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


def test_unbuilt_tower_one_line_without_text_only(twins, tmp_path):
    _, release = twins
    config = json.loads((release / "config.json").read_text())
    tower = "google/siglip-so400m-patch14-384"  # a branch of the remote code's build_vision_tower not exported
    (release / "config.json").write_text(json.dumps({**config, "mm_vision_tower": tower}))
    try:
        result = CliRunner().invoke(app, ["build", str(release), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    finally:
        (release / "config.json").write_text(json.dumps(config))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"mm_vision_tower {tower!r}" in said and "only the UMT and InternVideo2 towers" in said
    assert "--text-only" in said
    assert not (tmp_path / "pkg").exists()
