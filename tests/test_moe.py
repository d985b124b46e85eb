"""Mixtures of experts against the HF classes: logits (prompt + decode), greedy onnxruntime-genai
tokens, int4/int8 QMoE packages, MXFP4 gpt-oss checkpoints, fp16 CUDA graphs, inspect and lints."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from moe_models import FAMILIES, load_dequantized_reference, save_gpt_oss_mxfp4, save_moe
from reference import assert_varied, hf_generate, hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner
from weight_layouts import INT4_MAX_ERROR, INT8_MAX_ERROR, relative_errors

from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build
from gqa_export.quant.quantize import QuantOptions
from gqa_export.runtime.run import generate_greedy, load

PROMPT = [0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13]  # longer than the windows (8)
PROMPTS = [[0], [0, 17, 45, 99, 200, 3, 7], [(11 * i + 5) % 380 for i in range(30)]]
NEW = 40
# name -> (model_type, hub layout, config overrides); the hub layout stores experts one by one,
# transformers 5.x's own (`_v5`) fused [E, 2I, H]
VARIANTS: dict[str, tuple[str, bool, dict]] = {
    **{family: (family, True, {}) for family in FAMILIES},
    "qwen3_moe_norm_v5": ("qwen3_moe", False, {"norm_topk_prob": True}),
    "mixtral_v5": ("mixtral", False, {}),
    "phimoe_v5": ("phimoe", False, {}),
    "granitemoe_v5": ("granitemoe", False, {}),
}


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    checkpoints: dict[str, object] = {}
    packages: dict[tuple, object] = {}

    def checkpoint(name: str):
        if name not in checkpoints:
            family, hub, overrides = VARIANTS[name]
            checkpoints[name] = save_moe(root / name, family, hub_layout=hub, **overrides)
        return checkpoints[name]

    def package(name: str, mode: str = "gqa", ep: str = "cpu", precision: str = "fp32"):
        key = (name, mode, ep, precision)
        if key not in packages:
            out = root / "-".join(key)
            build(BuildOptions(str(checkpoint(name)), out, ep=ep, precision=precision, attention=mode, smoke=False))
            packages[key] = out
        return packages[key]

    return checkpoint, package


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_hf(moe, name):
    checkpoint, package = moe
    tokens, got = ort_prefill_and_decode(package(name), PROMPT, steps=6)
    ref = hf_logits(hf_model(checkpoint(name)), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0


@pytest.mark.parametrize("name", FAMILIES)
def test_generates_like_hf(moe, name):
    checkpoint, package = moe
    hf, model = hf_model(checkpoint(name)), load(package(name), "cpu")
    seen: list[list[int]] = []
    for prompt in PROMPTS:
        got = generate_greedy(package(name), prompt, NEW, min_new_tokens=NEW, model=model)
        assert got.tokens == hf_generate(hf, prompt, NEW), prompt
        seen.append(got.tokens)
    assert_varied(seen)


@pytest.mark.parametrize("mode", ["bias", "split"])
@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe", "phimoe"])
def test_standard_attention_modes(moe, name, mode):
    checkpoint, package = moe
    hf = hf_model(checkpoint(name))
    for prompt in PROMPTS[1:]:
        assert generate_greedy(package(name, mode), prompt, NEW, min_new_tokens=NEW).tokens == hf_generate(
            hf, prompt, NEW
        )


def test_gpt_oss_sinks_need_gqa(moe, tmp_path):
    checkpoint, _ = moe
    with pytest.raises(InputError, match="attention sinks need GroupQueryAttention"):
        build(BuildOptions(str(checkpoint("gpt_oss")), tmp_path / "p", attention="bias", smoke=False))
    assert not (tmp_path / "p").exists()


def test_gpt_oss_mxfp4_checkpoint(tmp_path):
    """Experts stored as MXFP4 blocks + e8m0 scales (the released format) are read as stored:
    logits equal HF's model with the same dequantized experts."""
    import torch

    folder = save_gpt_oss_mxfp4(tmp_path / "mxfp4", dtype=torch.float32)
    out = tmp_path / "pkg"
    build(BuildOptions(str(folder), out, smoke=False))
    tokens, got = ort_prefill_and_decode(out, PROMPT, steps=4)
    ref = hf_logits(load_dequantized_reference(folder), tokens, len(PROMPT))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("precision", ["int4", "int8"])
@pytest.mark.parametrize("name", FAMILIES)
def test_quantized_experts(moe, tmp_path, name, precision):
    """QMoE for the experts (Gemma-4's plain-op experts stay float), MatMulNBits elsewhere; prompt
    logits vs the fp32 export. int8 proves the layout (a layout error gives ~1.0 relative error);
    int4 on these tiny random models moves them 0.11-0.89 (measured)."""
    checkpoint, _ = moe
    out = tmp_path / precision
    quant = QuantOptions(accuracy_level=0)
    result = build(BuildOptions(str(checkpoint(name)), out, precision=precision, quant=quant, report=True))
    assert result.smoke is not None and len(result.smoke.tokens) == 16
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
    assert ("QMoE" in ops) is (name != "gemma4_text") and "MoE" not in ops
    report = json.loads((out / "quant_report.json").read_text())["logits_vs_float"]
    if precision == "int8":
        assert report["relative_l2"] < 0.3 and report["next_token_agreement"] > 0.75
    # every MatMulNBits weight (attention, routers, dense layers, lm_head) dequantized independently;
    # the experts' QMoE layout: tests/quant/test_layouts.py, their accuracy on a trained MoE:
    # tests/quant/test_experts_perplexity.py
    errors = relative_errors(out, checkpoint(name))
    assert errors and max(errors.values()) < {"int4": INT4_MAX_ERROR, "int8": INT8_MAX_ERROR}[precision], errors


@pytest.mark.parametrize("name", ["qwen3_moe", "gpt_oss"])
def test_fp16_cuda_graph(moe, name):
    checkpoint, package = moe
    path = package(name, ep="cuda", precision="fp16")
    graph = onnx.load(str(path / "model.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.op_type == "MoE"]
    inits = {t.name: t for t in graph.initializer}
    assert nodes and all(inits[n.input[2]].data_type == onnx.TensorProto.FLOAT16 for n in nodes)
    tokens, got = ort_prefill_and_decode(path, PROMPT, steps=3)
    ref = hf_logits(hf_model(checkpoint(name)), tokens, len(PROMPT))
    assert np.abs(got - ref).max() < 3e-2 * max(1.0, float(np.abs(ref).max()))


def test_inspect_reports_experts(moe):
    _, package = moe
    result = CliRunner().invoke(app, ["inspect", str(package("qwen3_moe")), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    blocks = report["experts"]
    assert [(e["layer"], e["experts"], e["top_k"], e["precision"], e["normalize"]) for e in blocks] == [
        (0, 8, 3, "float", False),
        (2, 8, 3, "float", False),
    ]  # fmt: skip  (layer 1 is dense: mlp_only_layers)
    assert report["summary"]["graphs"][0]["weights"]["experts"] == "float"
    assert json.loads((package("qwen3_moe") / "genai_config.json").read_text())["model"]["type"] == "decoder"


def test_lint_catches_qmoe_that_would_renormalize(moe, tmp_path):
    """A QMoE without router_weights for a model that does not renormalize routes wrongly."""
    import shutil

    checkpoint, _ = moe
    out = tmp_path / "int4"
    build(BuildOptions(str(checkpoint("qwen3_moe")), out, precision="int4", smoke=False))
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
