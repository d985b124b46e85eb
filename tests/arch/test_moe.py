"""Mixtures of experts, what only they have: gpt-oss's attention sinks (GQA only) and its MXFP4
checkpoints, inspect's account of the experts and the QMoE lint. The checks every MoE family gets
(logits and greedy tokens against HF in its modes, int4/int8 QMoE packages, fp16 CUDA graphs) are
its row in tests/families.py, run by tests/arch/test_families.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from families import PROMPT
from moe_models import load_dequantized_reference, save_gpt_oss_mxfp4
from reference import hf_logits, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build


def test_gpt_oss_sinks_need_gqa(builds, tmp_path):
    with pytest.raises(InputError, match="attention sinks need GroupQueryAttention"):
        build(BuildOptions(str(builds.checkpoint("gpt_oss")), tmp_path / "p", attention="bias", smoke=False))
    assert not (tmp_path / "p").exists()


def test_gpt_oss_mxfp4_checkpoint(tmp_path):
    """Experts stored as MXFP4 blocks + e8m0 scales (the released format) are read as stored:
    logits equal HF's model with the same dequantized experts."""
    import torch

    folder = save_gpt_oss_mxfp4(tmp_path / "mxfp4", dtype=torch.float32)
    out = tmp_path / "pkg"
    build(BuildOptions(str(folder), out, smoke=False))
    tokens, got = ort_prefill_and_decode(out, list(PROMPT), steps=4)
    ref = hf_logits(load_dequantized_reference(folder), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_inspect_reports_experts(builds):
    package = builds.package("qwen3_moe")
    result = CliRunner().invoke(app, ["inspect", str(package), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    blocks = report["experts"]
    assert [(e["layer"], e["experts"], e["top_k"], e["precision"], e["normalize"]) for e in blocks] == [
        (0, 8, 3, "float", False),
        (2, 8, 3, "float", False),
    ]  # fmt: skip  (layer 1 is dense: mlp_only_layers)
    assert report["summary"]["graphs"][0]["weights"]["experts"] == "float"
    assert json.loads((package / "genai_config.json").read_text())["model"]["type"] == "decoder"


def test_lint_catches_qmoe_that_would_renormalize(builds, tmp_path):
    """A QMoE without router_weights for a model that does not renormalize routes wrongly."""
    import shutil

    out = tmp_path / "int4"
    build(BuildOptions(str(builds.checkpoint("qwen3_moe")), out, precision="int4", smoke=False))
    broken = shutil.copytree(out, tmp_path / "broken")
    model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "QMoE":
            del node.input[14:]
    onnx.save(model, str(broken / "model.onnx"))
    ok = CliRunner().invoke(app, ["inspect", str(out), "--json"])
    assert ok.exit_code == 0
    bad = CliRunner().invoke(app, ["inspect", str(broken), "--json"])
    assert bad.exit_code == 1 and "qmoe-renormalizes" in {f["id"] for f in json.loads(bad.stdout)["findings"]}
