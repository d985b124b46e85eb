"""Package stage: tokenizer files, atomic staging, and the tiny model that ships in the repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reference import hf_generate, hf_model

from gqa_export.errors import InputError
from gqa_export.package.staging import StagedPackage, copy_tokenizer
from gqa_export.pipeline import BuildOptions, build
from gqa_export.runtime.run import generate_greedy

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "tiny-llama"


def test_shipped_tiny_llama_exports_and_generates_like_hf(tmp_path):
    result = build(BuildOptions(str(SHIPPED), tmp_path / "pkg"))
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    package = result.output
    assert {"special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"} <= set(result.files)
    assert json.loads((package / "tokenizer_config.json").read_text()) == json.loads(
        (SHIPPED / "tokenizer_config.json").read_text()
    )  # a Hub-style tokenizer config is copied untouched
    prompt = [0, 45, 319, 81, 84, 266]
    got = generate_greedy(package, prompt, 40, min_new_tokens=40)
    assert got.tokens == hf_generate(hf_model(SHIPPED), prompt, 40)


def test_tokenizer_is_required(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with pytest.raises(InputError, match=r"no tokenizer\.json or tokenizer\.model"):
        copy_tokenizer(tmp_path / "src", tmp_path / "dst")


def test_staging_is_removed_on_failure_and_renamed_on_commit(tmp_path):
    out = tmp_path / "pkg"
    with pytest.raises(RuntimeError), StagedPackage(out, overwrite=False) as staged:
        (staged.path / "model.onnx").write_text("x")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with StagedPackage(out, overwrite=False) as staged:
        (staged.path / "model.onnx").write_text("new")
        staged.commit()
    assert (out / "model.onnx").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["pkg"]
