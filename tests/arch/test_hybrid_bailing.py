"""Mutants of what Ling 3 (bailing_hybrid) adds to Kimi-Linear's KDA and DeepSeek-V3's latent attention
and experts it reuses (docs/hybrid-state.md §8.20): each export with one mechanism dropped must break HF
parity, the registry's check (tests/families.py row bailing_hybrid), so a graph without it fails there.

The bounded forget gate (Kimi's -exp(A_log) softplus(f + dt_bias) in its place), the sigmoid gate per
head of the latent attention (dropped), the routed experts' and the shared expert's SwiGLU limits (each
set to 0 in config.json, the reference keeping them), and the routed limit clipped before the activation
as com.microsoft.MoE does by itself (graph/limited_swiglu.py moves it past the activation)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from families import PROMPT
from reference import hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build

FAMILY = "bailing_hybrid"


def _parity(package, checkpoint) -> float:
    """max |ORT - HF| over the prompt and two decode steps."""
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())


def _export(checkpoint, out):
    build(BuildOptions(str(checkpoint), out, smoke=False, text_only=True))
    return out


def test_the_correct_bailing_package_passes(builds):
    assert _parity(builds.package(FAMILY), builds.checkpoint(FAMILY)) < 1e-4


def _spec_mutants() -> dict:
    from gqa_export.arch import SPECS

    spec = SPECS[FAMILY]
    return {
        "softplus-decay": replace(spec, mixers=replace(spec.mixers, bounded_decay=False)),
        "head-gate-dropped": replace(spec, layer=replace(spec.layer, output_gate=None)),
    }


@pytest.mark.parametrize("mutant", ["softplus-decay", "head-gate-dropped"])
def test_mutant_spec_mechanism_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    from gqa_export.arch import SPECS

    monkeypatch.setitem(SPECS, FAMILY, _spec_mutants()[mutant])
    checkpoint = builds.checkpoint(FAMILY)
    assert _parity(_export(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-3


@pytest.mark.parametrize("key", ["expert_swiglu_limit_list", "share_expert_swiglu_limit_list"])
def test_mutant_limits_dropped_fail_hf_parity(builds, tmp_path, key):
    """The package of a copy whose config.json holds no limits (zeros) against HF with them."""
    original = builds.checkpoint(FAMILY)
    copy = shutil.copytree(original, tmp_path / "ckpt")
    config = json.loads((copy / "config.json").read_text())
    assert any(config[key]), key
    config[key] = [0] * len(config[key])
    (copy / "config.json").write_text(json.dumps(config))
    assert _parity(_export(copy, tmp_path / "pkg"), original) > 1e-3


def test_mutant_limit_before_the_activation_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The MoE op's own clip (silu(min(g, l)) * clip(u, -l, l)) at the layer's limit, not moved past silu."""
    import gqa_export.graph.limited_swiglu as limited

    monkeypatch.setattr(limited, "op_limit", lambda limit: (limit, 1.0))
    checkpoint = builds.checkpoint(FAMILY)
    assert _parity(_export(checkpoint, tmp_path / "pkg"), checkpoint) > 1e-3


def test_a_stored_mtp_layer_is_not_read(builds, tmp_path):
    """The hub's checkpoints store num_nextn_predict_layers multi-token-prediction layers after the decoder's
    (transformers ignores them on load): the package is the registry's byte for byte. With the config saying
    there are none, a layer past num_hidden_layers is still refused (exit 2, one line)."""
    from safetensors.torch import load_file, save_file
    from typer.testing import CliRunner

    from gqa_export.cli import app

    checkpoint = shutil.copytree(builds.checkpoint(FAMILY), tmp_path / "ckpt")
    tensors = load_file(checkpoint / "model.safetensors")
    layers = json.loads((checkpoint / "config.json").read_text())["num_hidden_layers"]
    for name in [n for n in tensors if n.startswith("model.layers.0.")]:  # an MTP layer's worth of tensors
        tensors[name.replace("model.layers.0.", f"model.layers.{layers}.", 1)] = tensors[name].clone()
    save_file(tensors, checkpoint / "model.safetensors", metadata={"format": "pt"})
    out = _export(checkpoint, tmp_path / "pkg")
    for name in ("model.onnx", "model.onnx.data"):
        assert (out / name).read_bytes() == (builds.package(FAMILY) / name).read_bytes(), name
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "refused")])
    assert result.exit_code == 2 and "checkpoint holds 3 layers" in result.output, result.output
    assert not (tmp_path / "refused").exists()


def test_the_unbounded_forget_gate_matches_hf(tmp_path):
    """kda_safe_gate false: Kimi's -exp(A_log) softplus(f + dt_bias), read from the config (the registry
    row has the bounded default; its softplus mutant above is this graph against the bounded HF)."""
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", FAMILY, kda_safe_gate=False)
    assert _parity(_export(checkpoint, tmp_path / "pkg"), checkpoint) < 1e-4
