"""Mutants of the mechanisms the latent-attention families of issue #39 item 3 brought
(gqa_export/arch/latent_families.py): each planted into a copy of the correct registry package
(tests/mutants.py), or into the spec the package is built from, must break HF parity, the
registry's check (tests/arch/test_families.py), so a graph that dropped the mechanism fails it.

MiniCPM3: the embedding scale (scale_emb 12 dropped), the residual branches' scale
(scale_depth / sqrt(layers) = 0.808 dropped: Llama's plain residual), the logits divisor
(hidden_size / dim_model_base = 3.2 dropped), and its rotate-half RoPE on the rope dims built as
DeepSeek's GPT-J pairs. Sarvam-MLA (DeepSeek-V3's graph under its own config class): its YaRN
mscale left out of the softmax scale. GLM-4-MoE-Lite: its expert groups ignored; its mlp_layer_types
ignored (the build stops: the checkpoint's tensors follow the list)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from families import require_registered
from mutants import copy_package, edit_initializers
from reference import parity_error

from gqa_export.pipeline import BuildOptions, build

MINICPM3 = "minicpm3"
# the tiny config's scales (tests/llama_like_models.py): scale_emb, scale_depth / sqrt(3), 64 / 20
MINICPM3_SCALES = {
    "embedding-scale-dropped": ("const.scale*", 12.0),
    "residual-scale-dropped": ("const.scale*", 1.4 / math.sqrt(3)),
    "logits-divisor-dropped": ("const.logits_scaling", 64 / 20),
}


def _registered(family: str) -> None:
    require_registered(family)


def _set_to_one(value: float):
    """A change that turns the scalar constants equal to `value` (fp32) into 1, leaving the rest."""

    def change(values: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(values, np.float32(value), rtol=1e-6), 1.0, values).astype(values.dtype)

    return change


def test_the_correct_minicpm3_package_passes(builds):
    _registered(MINICPM3)
    assert parity_error(builds.package(MINICPM3), builds.checkpoint(MINICPM3)) < 1e-4  # measured 7.2e-7


@pytest.mark.parametrize("mutant", MINICPM3_SCALES)
def test_mutant_minicpm3_scale_dropped_fails_hf_parity(builds, tmp_path, mutant):
    _registered(MINICPM3)
    pattern, value = MINICPM3_SCALES[mutant]
    package = builds.package(MINICPM3)
    broken = copy_package(package, tmp_path / mutant)
    before = (package / "model.onnx").read_bytes()
    assert edit_initializers(broken, pattern, _set_to_one(value)), pattern
    assert (broken / "model.onnx").read_bytes() != before, f"{mutant}: no constant of {value} in the graph"
    assert parity_error(broken, builds.checkpoint(MINICPM3)) > 1e-2


def test_mutant_minicpm3_rope_as_pairs_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The rope dims rotated in GPT-J pairs (DeepSeek's layout) where MiniCPM3 rotates halves."""
    from gqa_export.arch import SPECS

    _registered(MINICPM3)
    monkeypatch.setitem(SPECS, MINICPM3, replace(SPECS[MINICPM3], rope_interleaved=True))
    checkpoint = builds.checkpoint(MINICPM3)
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) > 1e-2


def test_mutant_sarvam_mla_mscale_left_out_fails_hf_parity(builds, tmp_path, monkeypatch):
    """Sarvam's YaRN (deepseek_yarn in its published config) puts mscale(factor, mscale_all_dim)^2 on
    the softmax scale (1.297 for the tiny config's factor 4, mscale_all_dim 1): left out, parity breaks."""
    from gqa_export.model import dims

    _registered("sarvam_mla")
    monkeypatch.setattr(dims, "latent_scale", lambda config, lat: float(lat.head_dim) ** -0.5)
    checkpoint = builds.checkpoint("sarvam_mla")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) > 1e-2


def test_mutant_glm4_moe_lite_expert_groups_ignored_fails_hf_parity(builds, tmp_path, monkeypatch):
    """The top-k taken over every expert instead of within the 2 best of 4 groups."""
    from gqa_export.model import moe

    _registered("glm4_moe_lite")
    monkeypatch.setattr(moe, "expert_groups", lambda opt, spec, experts: (1, 1))
    checkpoint = builds.checkpoint("glm4_moe_lite")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) > 1e-2


def test_mutant_glm4_moe_lite_mlp_layer_types_ignored_cannot_build(builds, tmp_path, monkeypatch):
    """mlp_layer_types not read (DeepSeek's first_k_dense_replace rule: every layer sparse): the dense
    middle layer has no experts to read, so the build stops in one line rather than export a wrong
    graph (the list cannot be misread silently: the checkpoint's tensors follow it)."""
    from gqa_export.arch import SPECS
    from gqa_export.arch.spec import config_keys
    from gqa_export.errors import InputError

    _registered("glm4_moe_lite")
    spec = SPECS["glm4_moe_lite"]
    keys = config_keys(**{**spec.config_keys, "mlp_layer_types": "not_a_config_key"})
    monkeypatch.setitem(SPECS, "glm4_moe_lite", replace(spec, config_keys=keys))
    with pytest.raises(InputError) as raised:
        build(BuildOptions(str(builds.checkpoint("glm4_moe_lite")), tmp_path / "pkg", smoke=False))
    assert "layers.1" in str(raised.value) and "\n" not in str(raised.value)


def test_mutant_axk1_expert_output_norm_dropped_fails_hf_parity(builds, tmp_path, monkeypatch):
    """A.X-K1's RMSNorm over the sparse block's output (post_mlp_layernorm) left out: the routed + shared
    sum is added to the residual unnormed, as DeepSeek-V3 adds it."""
    from gqa_export.arch import SPECS

    _registered("axk1")
    spec = SPECS["axk1"]
    assert spec.moe is not None
    unnormed = replace(spec.moe, names=replace(spec.moe.names, output_norm=None))
    monkeypatch.setitem(SPECS, "axk1", replace(spec, moe=unnormed))
    checkpoint = builds.checkpoint("axk1")
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", checkpoint) > 1e-2
