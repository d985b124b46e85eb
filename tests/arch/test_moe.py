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


# Placement keys of another family's rule in a config whose class never reads them (MiniMax-M2, GraniteMoE-Shared,
# FlexOlmo, Sarvam-MoE, AFMoE configs carry some): transformers places the experts by its own rule alone, and so
# does the export (it stopped with "weight ... missing" before, reading them as dense layers). Each row: the spec,
# the config's keys on 4 layers, and which layers HF builds sparse.
_STRAY = {"mlp_only_layers": [2], "decoder_sparse_step": 2, "num_dense_layers": 3, "first_k_dense_replace": 3,
          "moe_layer_end_index": 0, "moe_layers": [0], "expert_layer_period": 3}  # fmt: skip
_EVERY = [True] * 4


@pytest.mark.parametrize(
    ("arch", "config", "sparse"),
    [
        ("minimax_m2", _STRAY, _EVERY),
        ("granitemoeshared", _STRAY, _EVERY),
        ("flex_olmo", _STRAY, _EVERY),
        ("mixtral", _STRAY, _EVERY),
        ("solar_open", _STRAY, _EVERY),  # its config class drops GLM-4-MoE's first_k_dense_replace
        ("sarvam_moe", {**_STRAY, "first_k_dense_replace": 1}, [False, True, True, True]),
        ("afmoe", {**_STRAY, "num_dense_layers": 1}, [False, True, True, True]),
        ("deepseek_v3", {**_STRAY, "first_k_dense_replace": 2}, [False, False, True, True]),
        ("qwen3_moe", {**_STRAY, "decoder_sparse_step": 1}, [True, True, False, True]),  # its own keys still read
        (
            "ernie4_5_moe",
            {**_STRAY, "moe_layer_start_index": 1, "moe_layer_end_index": 2, "moe_layer_interval": 1},
            [False, True, True, False],
        ),
        ("jamba", {**_STRAY, "expert_layer_period": 2, "expert_layer_offset": 1}, [False, True, False, True]),
        (
            "glm4_moe_lite",
            {**_STRAY, "mlp_layer_types": ["dense", "sparse", "sparse", "dense"]},
            [False, True, True, False],
        ),
    ],
)
def test_sparse_layers_by_the_keys_the_class_reads(arch, config, sparse):
    from types import SimpleNamespace

    from gqa_export.arch import get_spec
    from gqa_export.model.dims import _opt_for
    from gqa_export.model.layer_kinds import sparse_layer

    spec = get_spec(arch)
    experts = {"num_experts": 5, "num_local_experts": 5, "n_routed_experts": 5, "moe_num_experts": 5}
    opt = _opt_for(SimpleNamespace(num_hidden_layers=4, **experts, **config), spec)
    assert [sparse_layer(opt, spec, i) for i in range(4)] == sparse


@pytest.mark.parametrize(
    ("arch", "refused"),
    [("deepseek_v3", True), ("glm4_moe", True), ("hunyuan_v1_moe", True), ("ernie4_5_moe", True),
     ("granitemoeshared", True), ("sarvam_moe", True), ("deepseek_v32", True),
     ("dots1", False), ("exaone_moe", False), ("mimo_v2_flash", False), ("granitemoe_swa", False), ("mixtral", False)],
)  # fmt: skip
def test_a_sliding_window_the_class_never_applies_is_refused(arch, refused):
    """A stray sliding_window (4) in a config whose class never windows: transformers' forward attends to
    everything while its cache keeps the last 4 keys when decoding (measured on DeepSeek-V3 / HunYuan-MoE tiny
    models: decode 2.5 / 4.4 off its own forward), so the export refuses it; it windowed the prompt before
    (prompt logits 3.4 / 5.1 off HF). The windowed families still read it."""
    from gqa_export.arch import get_spec

    assert any(r.config_key == "sliding_window" and r.applies(4, 256) for r in get_spec(arch).refusals) is refused


def test_a_stray_window_past_the_context_is_read_as_none(builds, tmp_path):
    """sliding_window = max_position_embeddings (256) never trims HF's cache within the context, so it is
    exported (a window max_length cannot pass), equal to HF; one less (255) is refused."""
    from mutants import edited_checkpoint
    from reference import parity_error

    shorter = edited_checkpoint(builds.checkpoint("deepseek_v3"), tmp_path / "255", sliding_window=255)
    with pytest.raises(InputError, match=r"sliding_window shorter than max_position_embeddings.*=255"):
        build(BuildOptions(str(shorter), tmp_path / "refused", smoke=False))
    context = edited_checkpoint(builds.checkpoint("deepseek_v3"), tmp_path / "256", sliding_window=256)
    build(BuildOptions(str(context), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", context) < 1e-4


def test_a_stray_sliding_window_is_refused_in_one_line(tmp_path):
    from transformers import AutoConfig

    checkpoint = tmp_path / "ckpt"  # the config alone: the refusal comes before any weight is read
    AutoConfig.for_model("deepseek_v3", num_hidden_layers=2, hidden_size=64, sliding_window=4).save_pretrained(
        checkpoint
    )
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2, result.output
    assert "sliding_window=4" in result.output and "Traceback" not in result.output, result.output


def test_int4_says_which_experts_stay_float_when_no_block_divides_them(tmp_path):
    """Hidden 40 (no multiple of 16, the smallest QMoE block): the experts stay float, listed as excluded in the
    manifest, and the build says so in a note (it said nothing)."""
    from moe_models import save_moe

    checkpoint = save_moe(tmp_path / "ckpt", "qwen3_moe", hidden_size=40, num_attention_heads=5,
                          num_key_value_heads=1, head_dim=8, moe_intermediate_size=32, num_hidden_layers=1)  # fmt: skip
    result = build(BuildOptions(str(checkpoint), tmp_path / "pkg", precision="int4", smoke=False))
    said = [n for n in result.notes if "expert weight(s) stay float" in n]
    excluded = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["options"]["quantization"]["excluded"]
    assert len(said) == 1 and "2 expert weight(s)" in said[0] and len(excluded) == 2, (said, excluded)
