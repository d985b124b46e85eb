"""The multimodal-type table (gqa_export/package/multimodal_types.py): every genai type a recipe
builds has one record, each record's tower row agrees with what `run` says about audio, `run`
reads the table without the graph builders, and `run --image/--audio` prepares prompts by it.

Whether each marker is the one genai's processor expands is proven with real packages against HF
(tests/package/multimodal/: the Gemma-3, Gemma-4, Qwen, LFM2-VL and Mistral-3 packages); these
checks are the table's own consistency, fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gqa_export.errors import InputError
from gqa_export.package.multimodal_types import MULTIMODAL_TYPES, MultimodalType
from gqa_export.package.towers import VisionTower
from gqa_export.recipes import builtin_recipes
from gqa_export.runtime import images

REPO = Path(__file__).resolve().parents[2]
KINDS = list(MULTIMODAL_TYPES.values())
IDS = list(MULTIMODAL_TYPES)


def test_every_recipe_type_has_a_record_and_every_record_a_recipe():
    built = {r.multimodal_model_type for r in builtin_recipes() if r.multimodal_model_type}
    assert built == set(MULTIMODAL_TYPES)


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_tower_row_and_audio_markers_agree(kind: MultimodalType):
    """A type with an audio tower names the markers `run --audio` inserts; one without names none."""
    tower = kind.tower()
    assert isinstance(tower, VisionTower)
    assert bool(kind.audio_markers) == (tower.audio is not None)
    assert kind.image_marker and kind.image_marker not in kind.audio_markers


def test_run_reads_the_table_without_the_graph_builders():
    """runtime/images.py imports the table, never package/towers.py (onnx, onnx_ir, the encoders)."""
    heavy = ("onnx", "onnx_ir", "gqa_export.package.towers")
    probe = f"import sys, gqa_export.runtime.images\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _package(tmp_path: Path, model_type: str, speech: bool = False, vision: bool = True) -> Path:
    model = {"type": model_type, **({"vision": {"filename": "vision.onnx"}} if vision else {})}
    if speech:
        model["speech"] = {"filename": "speech.onnx"}
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": model}))
    return tmp_path


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_run_prepares_prompts_by_the_record(kind: MultimodalType, tmp_path):
    package = _package(tmp_path, kind.model_type, speech=bool(kind.audio_markers))
    assert images.image_type(package) is kind
    marker = kind.image_marker
    two = images.with_markers("Describe", kind, 2)
    if kind.numbered_markers:  # image N's own marker (genai's phi3v)
        assert two == "<|image_1|>\n<|image_2|>\nDescribe"
    else:
        assert two == (f"{marker}\n{marker}\nDescribe" if kind.adjacent_markers_merge else f"{marker}{marker}Describe")
    assert images.with_markers(f"a {marker} b", kind, 1) == f"a {marker} b"
    if kind.adjacent_markers_merge:
        with pytest.raises(InputError, match="adjacent"):
            images.with_markers(f"{marker}{marker} x", kind, 2)
    if kind.audio_markers:
        assert images.audio_marker(package, "Say", 1) == kind.audio_markers[0] + "Say"
        assert images.UNEXPORTED_MARKERS[kind.model_type] == kind.audio_markers
        (tmp_path / "text").mkdir()
        no_speech = _package(tmp_path / "text", kind.model_type)
        for audio in kind.audio_markers:
            with pytest.raises(InputError, match="exports no audio tower"):
                images.check_unexported_markers(no_speech, f"{audio} hi")
    else:
        assert kind.model_type not in images.UNEXPORTED_MARKERS
        with pytest.raises(InputError, match="has no speech model"):
            images.audio_marker(package, "Say", 1)


def test_run_refuses_types_without_a_record(tmp_path):
    with pytest.raises(InputError, match="--image is not supported for model type 'llava'"):
        images.image_type(_package(tmp_path, "llava"))
    with pytest.raises(InputError, match="no vision model"):
        images.image_type(_package(tmp_path, "gemma3", vision=False))
