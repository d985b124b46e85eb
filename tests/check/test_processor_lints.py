"""The image-processor lints of a full multimodal package (gqa_export/check/processor_lints.py):
the package gqa-export writes passes, and each planted mistake is a finding (docs/multimodal.md §7)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gqa_export.check.lints import lint
from gqa_export.check.reader import load_package

pytest.importorskip("PIL")  # the Gemma-3 checkpoint's HF processor


def _processor_ids(folder: Path) -> list[str]:
    return [f.id for f in lint(load_package(folder)) if f.id.startswith("processor-")]


@pytest.fixture
def copy(gemma3_full_package: Path, tmp_path: Path) -> Path:
    out = tmp_path / "pkg"
    shutil.copytree(gemma3_full_package, out)
    return out


def _edit_transforms(folder: Path, edit) -> None:
    path = folder / "processor_config.json"
    config = json.loads(path.read_text())
    config["processor"]["transforms"] = edit(config["processor"]["transforms"])
    path.write_text(json.dumps(config))


def test_written_package_has_no_processor_finding(gemma3_full_package):
    assert _processor_ids(gemma3_full_package) == []


def test_mutant_convert_rgb_after_decode_is_a_finding(copy):
    convert = {"operation": {"name": "convert_to_rgb", "type": "ConvertRGB", "attrs": {}}}
    _edit_transforms(copy, lambda t: [t[0], convert, *t[1:]])
    assert _processor_ids(copy) == ["processor-convert-rgb"]


def test_mutant_without_decode_image_is_a_finding(copy):
    _edit_transforms(copy, lambda t: t[1:])
    assert _processor_ids(copy) == ["processor-decode"]


def test_mutant_missing_processor_file_is_a_finding(copy):
    (copy / "processor_config.json").unlink()
    assert _processor_ids(copy) == ["processor-missing"]
