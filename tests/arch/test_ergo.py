"""Mutants of the mechanisms Ergo brought (gqa_export/arch/sigmoid_router_families.py ERGO): each planted
into a copy of the correct registry package (tests/mutants.py), or built with the mechanism removed, must
move the logits far past the registry's 1e-4 bound against HF (tests/arch/test_families.py).

The per-expert RMSNorm (graph/normed_experts.py): dropped from the graph (each expert's raw output
weighted), its weights shared across experts (every expert reads expert 0's row), its weights at 1 (the
normalization kept, the learned scale dropped). The shared expert's own norm: its weight x1.5 (the routed
and shared outputs mixed in another ratio before the post-feedforward norm). The learned residual gates
(graph/learned_residual_gate.py): a plain add (both factors 1), the two factors exchanged on every channel
(a x residual + sqrt(1 - a^2) x block), and the residual factor exp(-softplus(w) / 2) alone (the
sqrt(1 + sigmoid(w)) dropped). The full layers' global_attention_scale (row ergo_scaled): a spec without it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from families import LONG_PROMPT
from mutants import build_planted, copy_package, edit_initializers, times
from reference import parity_error

from gqa_export.graph import normed_experts
from gqa_export.graph.learned_residual_gate import gate_factors
from gqa_export.pipeline import BuildOptions, build

BOUND = 1e-4  # the registry's parity bound
FAR = 10 * BOUND  # a mutant must move the logits at least this far


def _shared_rows(values: np.ndarray) -> np.ndarray:
    """Every expert's norm weight replaced by expert 0's: one norm shared across the experts."""
    return np.broadcast_to(values[:1], values.shape).copy()


def _swap(values: np.ndarray) -> np.ndarray:
    """a -> sqrt(1 - a^2): applied to both factors it exchanges them (their squares sum to 1)."""
    return np.sqrt(np.maximum(1.0 - values * values, 0.0)).astype(values.dtype)


def _swap_gate_factors(package) -> bool:
    return bool(edit_initializers(package, "*.branch_gate", _swap)) and bool(
        edit_initializers(package, "*.residual_gate", _swap)
    )


def _residual_without_root(values: np.ndarray) -> np.ndarray:
    """r = sqrt(1 + a) sqrt(1 - a) -> sqrt(1 - a): the sqrt(1 + sigmoid(w)) factor dropped."""
    a = np.sqrt(np.maximum(1.0 - values * values, 0.0))
    return np.sqrt(1.0 - a).astype(values.dtype)


# mutant -> edit of the package
MUTANTS = {
    "expert-norm-shared": lambda p: edit_initializers(p, "*.mlp.experts.post_expert_norm.weight", _shared_rows),
    "expert-norm-weight-ones": lambda p: edit_initializers(
        p, "*.mlp.experts.post_expert_norm.weight", lambda v: np.ones_like(v)
    ),
    "shared-expert-norm-scaled": lambda p: edit_initializers(p, "*.mlp.shared_experts.norm.weight", times(1.5)),
    "residual-gate-plain-add": lambda p: edit_initializers(p, "*_gate.*_gate", lambda v: np.ones_like(v)),
    "gate-factors-swapped": _swap_gate_factors,
    "residual-factor-root-dropped": lambda p: edit_initializers(p, "*.residual_gate", _residual_without_root),
}


@pytest.mark.parametrize("prompt", [None, LONG_PROMPT], ids=["prompt", "long"])
def test_the_correct_package_passes(builds, prompt):
    assert parity_error(builds.package("ergo"), builds.checkpoint("ergo"), prompt) < BOUND


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("ergo"), tmp_path / mutant)
    assert MUTANTS[mutant](broken)
    assert parity_error(broken, builds.checkpoint("ergo")) > FAR


def _expert_norm_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(normed_experts, "weightless_rms", lambda b, y, *norm: y)  # each expert's RMSNorm skipped


def test_expert_norm_dropped_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The graph without the per-expert RMSNorm (each expert's raw output times its norm weight, weighted)."""
    checkpoint = builds.checkpoint("ergo")
    out = build_planted(checkpoint, tmp_path / "expert-norm-dropped", monkeypatch, _expert_norm_dropped)
    assert parity_error(out, checkpoint) > FAR


def test_full_layer_score_scale_dropped_fails_hf_parity(builds, tmp_path, monkeypatch):
    """global_attention_scale 1.7 (row ergo_scaled) not applied: the full layers' logits at the plain softmax scale."""
    checkpoint = builds.checkpoint("ergo_scaled")
    out = build_planted(checkpoint, tmp_path / "score-scale-dropped", monkeypatch, {"score_scale": None}, "ergo")
    assert parity_error(out, checkpoint) > FAR


def test_gate_factors_are_the_modeling_codes():
    """sigmoid(w) and sqrt(1 + sigmoid(w)) exp(-softplus(w) / 2) as ErgoResidualGate computes them in fp32,
    over weights from -30 to 30 (softplus is linear past 20 in torch), and r = sqrt(1 - a^2)."""
    from transformers.models.ergo.modeling_ergo import ErgoResidualGate

    w = np.linspace(-30.0, 30.0, 241, dtype=np.float32)
    gate = ErgoResidualGate.__new__(ErgoResidualGate)
    torch.nn.Module.__init__(gate)
    gate.weight = torch.nn.Parameter(torch.from_numpy(w))
    block, residual = torch.ones(w.shape), torch.ones(w.shape)
    with torch.no_grad():
        a_hf = gate(block, torch.zeros(w.shape)).numpy()
        r_hf = gate(torch.zeros(w.shape), residual).numpy()
    a, r = gate_factors(w)
    assert np.abs(a.astype(np.float32) - a_hf).max() < 1e-6
    assert np.abs(r.astype(np.float32) - r_hf).max() < 1e-6
    inner = np.abs(w) <= 15  # beyond, 1 - a^2 cancels in float64
    assert np.allclose(r[inner], np.sqrt(1.0 - a[inner] ** 2), rtol=1e-6, atol=0.0)


def test_a_config_as_published_exports_the_same_package(builds, tmp_path):
    """The published config.json spells the window local_attention_window, gives rope_parameters flat (the
    class keys them by layer type, full layers None) and neither layer_types nor mlp_layer_types (the class
    derives them from global_attention_every_n_layers and num_dense_blocks): the same package byte for byte."""
    import json
    import shutil

    published = shutil.copytree(builds.checkpoint("ergo"), tmp_path / "published")
    config = json.loads((published / "config.json").read_text())
    for key in ("layer_types", "mlp_layer_types"):
        config.pop(key)
    config.update(global_attention_every_n_layers=2, num_dense_blocks=1)
    config["local_attention_window"] = config.pop("sliding_window")
    config["rope_parameters"] = config["rope_parameters"]["sliding_attention"]
    (published / "config.json").write_text(json.dumps(config))
    packages = [tmp_path / "as_saved", tmp_path / "as_published"]
    for checkpoint, out in zip((builds.checkpoint("ergo"), published), packages, strict=True):
        build(BuildOptions(str(checkpoint), out, smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (packages[0] / name).read_bytes() == (packages[1] / name).read_bytes(), name
