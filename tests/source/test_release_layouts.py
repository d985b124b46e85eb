"""Remote-code releases read as their transformers port (gqa_export/source/release_layouts.py): Phi-4-multimodal's
`phi4mm` release, its config converted as transformers' conversion script does and its renamed audio modules read
under transformers' names, builds the very package its transformers-layout twin builds (every graph, weight file and
config byte for byte); a renamed module left unread is a build that fails."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from phi4mm_models import save_phi4mm

from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import release_layouts
from gqa_export.source.release_layouts import converted_config

# transformers' module name -> the release's (the inverse of release_layouts.PHI4MM_RENAMES)
_AUDIO = r"^(model\.embed_tokens_extend\.audio_embed\.encoder\.encoders\.\d+\.)"
RELEASE_NAMES = (
    (_AUDIO + r"feed_forward_(in|out)\.gate_up_proj\.", r"\1feed_forward_\2.net.0.linear."),
    (_AUDIO + r"feed_forward_(in|out)\.down_proj\.", r"\1feed_forward_\2.net.2."),
    (_AUDIO + r"self_attn\.(q|k|v)_proj\.", r"\1self_attn.linear_\2."),
    (_AUDIO + r"self_attn\.o_proj\.", r"\1self_attn.linear_out."),
)


def _release_config(config: dict) -> dict:
    """The release's config.json spelling of a transformers-layout config: the audio settings under
    audio_processor.config with the release's key names, the crop size and audio downsampling under embd_layer."""
    audio = dict(config.pop("audio_config"))
    audio.pop("model_type", None)
    vision = dict(config["vision_config"])
    renamed = {
        "hidden_size": "attention_dim",
        "num_attention_heads": "attention_heads",
        "intermediate_size": "linear_units",
    }
    release_audio = {
        renamed.get(k, k): v for k, v in audio.items() if k not in ("nemo_conv_channels", "bias_max_distance")
    }
    release_audio["nemo_conv_settings"] = {"conv_channels": audio["nemo_conv_channels"]}
    release_audio["relative_attention_bias_args"] = {"type": "t5", "t5_bias_max_distance": audio["bias_max_distance"]}
    return {
        **config,
        "model_type": "phi4mm",
        "architectures": ["Phi4MMForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_phi4mm.Phi4MMConfig"},
        "embd_layer": {
            "image_embd_layer": {"crop_size": vision.pop("crop_size"), "use_hd_transform": True},
            "audio_embd_layer": {"downsample_rate": release_audio.pop("downsample_rate")},
        },
        "audio_processor": {"name": "cascades", "config": release_audio},
        # the release's code fixes SigLIP-so400m's sizes; this tiny tower's are given as transformers spells them
        "vision_config": vision,
    }


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[Path, Path]:
    from safetensors.numpy import load_file, save_file

    root = tmp_path_factory.mktemp("release")
    ported = save_phi4mm(root / "ported")
    release = Path(shutil.copytree(ported, root / "release"))
    config = json.loads((release / "config.json").read_text())
    (release / "config.json").write_text(json.dumps(_release_config(config)))
    for shard in release.glob("*.safetensors"):
        tensors = {}
        for name, tensor in load_file(shard).items():
            for pattern, replacement in RELEASE_NAMES:
                name, hits = re.subn(pattern, replacement, name)
                if hits:
                    break
            tensors[name] = tensor
        save_file(tensors, shard, metadata={"format": "pt"})
    return ported, release


def _files(package: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in package.iterdir() if p.name != "manifest.json"}


def test_the_release_builds_its_ports_package(twins, tmp_path):
    """vision.onnx, speech.onnx, embedding.onnx, model.onnx, their data, genai_config.json and the processor
    configs of the release are its transformers-layout twin's, byte for byte (the manifest names the source)."""
    ported, release = twins
    build(BuildOptions(str(ported), tmp_path / "ported", smoke=False))
    build(BuildOptions(str(release), tmp_path / "release", smoke=False))
    want, got = _files(tmp_path / "ported"), _files(tmp_path / "release")
    assert "speech.onnx" in want and "vision.onnx" in want and want.keys() == got.keys()
    assert [name for name in want if want[name] != got[name]] == []
    model_type = json.loads((tmp_path / "release" / "manifest.json").read_text())["model"]["model_type"]
    assert model_type == "phi4mm"


def test_a_rename_left_unread_fails_the_build(twins, tmp_path, monkeypatch):
    """Mutant: without the attention renames the release's audio attention is not found: the build stops."""
    _, release = twins
    monkeypatch.setattr(release_layouts, "PHI4MM_RENAMES", release_layouts.PHI4MM_RENAMES[:2])
    with pytest.raises(Exception, match="self_attn"):
        build(BuildOptions(str(release), tmp_path / "pkg", smoke=False))
    assert not (tmp_path / "pkg").exists()


def test_the_release_config_converts_as_transformers_does():
    """The release's spellings (transformers' convert_phi4_multimodal_weights_to_hf.py) become the class's keys;
    the SigLIP sizes stay the class's defaults where the release gives none, as its code fixes them."""
    release = {
        "model_type": "phi4mm", "architectures": ["Phi4MMForCausalLM"], "vision_lora": {"r": 256}, "hidden_size": 3072,
        "embd_layer": {"image_embd_layer": {"crop_size": 448, "embedding_cls": "tune_image"},
                       "audio_embd_layer": {"downsample_rate": 1, "embedding_cls": "audio"}},
        "audio_processor": {"name": "cascades", "config": {
            "attention_dim": 1024, "attention_heads": 16, "linear_units": 1536, "num_blocks": 24,
            "nemo_conv_settings": {"conv_channels": 1024}, "input_layer": "nemo_conv",
            "relative_attention_bias_args": {"type": "t5", "t5_bias_max_distance": 500}}},
    }  # fmt: skip
    config = converted_config(release)
    assert config["audio_config"] == {"hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 1536,
                                      "num_blocks": 24, "nemo_conv_channels": 1024, "bias_max_distance": 500,
                                      "downsample_rate": 1}  # fmt: skip
    assert config["vision_config"] == {"crop_size": 448}
    assert "embd_layer" not in config and "audio_processor" not in config and config["hidden_size"] == 3072
