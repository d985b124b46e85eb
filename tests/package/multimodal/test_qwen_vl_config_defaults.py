"""Qwen full packages (docs/multimodal.md §11) of checkpoints whose config leaves out what the HF
class supplies itself: rope_parameters without `mrope_section` / `mrope_interleaved` (the config
classes' own defaults name neither; HF's text rotary then reads its class's sections and
Qwen3-VL / Qwen3.5 interleave them all the same). genai's processor and greedy tokens against HF
generate, as tests/package/multimodal/test_qwen_full_package.py does for the published spellings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qwen_vl_package import KINDS, MARKER, assemble, genai_greedy, hf_greedy, png
from qwen_vl_package import save_qwen_vl as save
from reference import assert_varied

pytest.importorskip("PIL")  # PNG test images and HF's image processor
NEW = 12


def _without_mrope_keys(checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    rope = config["text_config"]["rope_parameters"]
    for key in ("mrope_section", "mrope_interleaved"):
        rope.pop(key, None)
    (checkpoint / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("kind", ["qwen3_vl", "qwen3_5"])
def test_class_mrope_defaults_equal_hf(tmp_path, kind):
    """Qwen3-VL (class sections [24, 20, 20] over a rotary half of 16) and Qwen3.5 ([11, 11, 10] over
    a rotary half of 8: their sum is not the half, and HF's interleaving reads the h and w counts
    alone): the build no longer refuses them, and a 64 x 96 image prompt's logits are within 1e-4 of
    HF's (measured 6.9e-6 / 7.4e-6) with equal greedy tokens."""
    import transformers as tf

    checkpoint = save(tmp_path / "ckpt", kind)
    _without_mrope_keys(checkpoint)
    package = assemble(checkpoint, tmp_path / "pkg")
    image = png(tmp_path / "fits.png", 64, 96, 0)
    hf = getattr(tf, KINDS[kind][1]).from_pretrained(checkpoint).eval()
    assert "mrope_section" not in hf.config.text_config.rope_parameters
    ids, logits, tokens = genai_greedy(package, "hi " + MARKER + " tell", [image], NEW)
    ref_logits, ref_tokens = hf_greedy(hf, ids, [image], NEW, KINDS[kind][4])
    assert np.abs(logits - ref_logits).max() < 1e-4
    assert_varied([ref_tokens])
    assert tokens == ref_tokens


@dataclass(frozen=True)
class _Dims:
    """The one ModelDims field class_mrope reads and replaces."""

    ropes: dict[str, Any]


@pytest.mark.parametrize(
    ("model_type", "sections", "interleaved"),
    [("qwen2_vl", [16, 24, 24], False), ("qwen2_5_vl", [16, 24, 24], False), ("qwen3_vl_moe", [24, 20, 20], True),
     ("qwen3_5_moe", [11, 11, 10], True)],
)  # fmt: skip
def test_class_mrope_fills_only_what_is_missing(model_type, sections, interleaved):
    """Each class's sections and interleaving where the rope names none; a key it names stays."""
    from types import SimpleNamespace

    from gqa_export.model.rope import RopeConfig
    from gqa_export.package.multimodal import class_mrope

    genai_type = {"qwen2_vl": "qwen2_5_vl", "qwen3_vl_moe": "qwen3_vl"}.get(model_type, model_type)
    config = SimpleNamespace(model_type=model_type)

    def params(named: dict[str, Any]) -> dict[str, Any]:
        dims = _Dims({"global": RopeConfig("default", 1e4, 128, named)})
        return class_mrope(genai_type, config, dims).ropes["global"].params  # type: ignore[arg-type]

    assert params({}) == {"mrope_section": sections, "mrope_interleaved": interleaved}
    assert params({"mrope_section": [2, 3, 3], "mrope_interleaved": False}) == {
        "mrope_section": [2, 3, 3], "mrope_interleaved": False
    }  # fmt: skip


# deepstack_visual_indexes HF runs without a refusal: the config class's default (8, 16, 24) under a
# 2-block tower (no block fires: no deepstack features), and a 4-block tower listing [3, 0, 3, 1]
# before a 2-layer decoder (blocks 0, 1, 3 fire in block order through mergers 1, 3, 0; the decoder
# adds the first two sets)
DEEPSTACKS = {"class_default": (2, [8, 16, 24], 64), "unsorted_repeated_past_the_layers": (4, [3, 0, 3, 1], 192)}


@pytest.mark.parametrize("case", list(DEEPSTACKS))
def test_deepstack_indexes_as_hf_runs_them(tmp_path, case):
    """decoder.hidden_size 64 x (1 + the sets the decoder adds), and genai greedy = HF generate with
    prompt logits within 1e-4 (measured 1.6e-5 / 1.8e-5) for a 64 x 96 image and for text only."""
    import transformers as tf

    depth, indexes, width = DEEPSTACKS[case]
    checkpoint = save(tmp_path / "ckpt", "qwen3_vl", depth=depth, deepstack_visual_indexes=indexes)
    package = assemble(checkpoint, tmp_path / "pkg")
    assert json.loads((package / "genai_config.json").read_text())["model"]["decoder"]["hidden_size"] == width
    image = png(tmp_path / "fits.png", 64, 96, 0)
    hf = tf.Qwen3VLForConditionalGeneration.from_pretrained(checkpoint).eval()
    got = []
    for prompt, images in (("hi " + MARKER + " tell", [image]), ("just text", [])):
        ids, logits, tokens = genai_greedy(package, prompt, images, NEW)
        ref_logits, ref_tokens = hf_greedy(hf, ids, images, NEW, KINDS["qwen3_vl"][4])
        assert np.abs(logits - ref_logits).max() < 1e-4, prompt
        assert tokens == ref_tokens, prompt
        got.append(ref_tokens)
    assert_varied(got)


def test_tower_of_another_temporal_patch_is_refused_without_the_key(tmp_path):
    """A tower whose temporal_patch_size is 3 under a preprocessor_config.json that names none: genai's
    processor patches two frames only, so the build refuses in one line before writing anything (it
    used to write a package whose vision model rejected every image's pixel_values at its first run)."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    checkpoint = save(tmp_path / "ckpt", "qwen2_5_vl", temporal_patch_size=3)
    pre = json.loads((checkpoint / "preprocessor_config.json").read_text())
    del pre["temporal_patch_size"]
    (checkpoint / "preprocessor_config.json").write_text(json.dumps(pre))
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p")])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "temporal_patch_size 3" in errors[0], result.output
    assert not (tmp_path / "p").exists()


def test_nearest_resample_is_refused(tmp_path):
    """preprocessor_config resample 0 (nearest): refused in one line before anything is written; and
    pinned: genai 0.18's Resize takes NEAREST in processor_config.json, then fails on every image
    (one that needs no resize too). When a genai runs it, this test fails and the refusal can go."""
    from typer.testing import CliRunner

    from gqa_export.cli import app

    checkpoint = save(tmp_path / "ckpt", "qwen2_5_vl")
    package = assemble(checkpoint, tmp_path / "pkg")
    config = json.loads((package / "processor_config.json").read_text())
    resize = next(t["operation"] for t in config["processor"]["transforms"] if t["operation"]["type"] == "Resize")
    resize["attrs"]["interpolation"] = "NEAREST"
    (package / "processor_config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="ImagingResample failed"):
        genai_greedy(package, "hi " + MARKER, [png(tmp_path / "fits.png", 56, 84, 0)], 1)
    pre = json.loads((checkpoint / "preprocessor_config.json").read_text())
    (checkpoint / "preprocessor_config.json").write_text(json.dumps({**pre, "resample": 0}))
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p")])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "resample 0 (nearest)" in errors[0], result.output
    assert not (tmp_path / "p").exists()
