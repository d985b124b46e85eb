"""Falcon-H1's parallel layers, what only they have (the checks every family gets are its row in
tests/families.py, the state checks shared with the other hybrids are in tests/arch/test_hybrid.py): a KV
cache and both states on every layer, prompts shorter than the conv kernel, the µP multipliers (each
dropped, the in_proj segments swapped, the dt segment scaled, either branch zeroed) and the gated
norm's order as mutants that fail parity, and config variants, one with a time_step_limit that clamps
dt in prompts only (docs/hybrid-state.md §8.2, §8.4)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree
from reference import hf_logits, hf_model, ort_prefill_and_decode, parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()


# Falcon-H1 (tests/dense_models.py falcon_h1): GQA and Mamba2 side by side in all 3 layers; K 4 over
# 96 + 2 x 2 x 16 = 160 channels, SSM state [4 heads, state 16, head dim 24]; every multiplier != 1
FALCON = "falcon_h1"


def test_falcon_h1_every_layer_carries_a_kv_cache_and_both_states(builds):
    config = json.loads((builds.package(FALCON) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and decoder["num_hidden_layers"] == 3 and "layer_types" not in decoder
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    graph = onnx.load(str(builds.package(FALCON) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    for i in range(3):
        assert shapes[f"past.{i}.conv"] == ["batch_size", 3, 160]
        assert shapes[f"past.{i}.recurrent"] == ["batch_size", 4, 16, 24]
        assert shapes[f"past_key_values.{i}.key"] == ["batch_size", 2, "past_sequence_length", 16]
    ops = [n.op_type for n in graph.node]
    assert ops.count("GroupQueryAttention") == ops.count("LinearAttention") == ops.count("CausalConvWithState") == 3
    result = runner.invoke(app, ["inspect", str(builds.package(FALCON)), "--json"])
    report = json.loads(result.stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 3 * (3 * 160 + 4 * 16 * 24) * 4
    assert result.exit_code == 0 and report["findings"] == []


@pytest.mark.parametrize("prompt", [(0,), (0, 17, 45)], ids=["one_token", "three_tokens"])
def test_falcon_h1_short_prompts_match_hf(builds, prompt):
    """Prompts shorter than the conv kernel, then 6 decode steps (the registry row's is 70 tokens)."""
    tokens, got = ort_prefill_and_decode(builds.package(FALCON), list(prompt), steps=6)
    ref = hf_logits(hf_model(builds.checkpoint(FALCON)), tokens, len(prompt))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _segment(values: np.ndarray, a: slice, b: slice) -> np.ndarray:
    """The in_proj output multiplier with two equal-width segments exchanged."""
    out = values.copy()
    out[a], out[b] = values[b], values[a]
    return out


FALCON_MUTANTS = {  # a multiplier const (model/multipliers.py), a planted bug
    "dropped_ssm_out": ("*.out_proj.output_multiplier", np.ones_like),
    "dropped_ssm_in": ("*.in_proj.input_multiplier", np.ones_like),
    "swapped_ssm_z_x": ("*.in_proj.output_multiplier", lambda v: _segment(v, slice(0, 96), slice(96, 192))),
    "swapped_ssm_b_c": ("*.in_proj.output_multiplier", lambda v: _segment(v, slice(192, 224), slice(224, 256))),
    "scaled_ssm_dt": ("*.in_proj.output_multiplier", lambda v: np.concatenate([v[:256], v[256:] * 1.5])),
    "dropped_attention_in": ("*.qkv_proj.input_multiplier", np.ones_like),
    "dropped_key": ("*.qkv_proj.output_multiplier", np.ones_like),
    "dropped_attention_out": ("*.o_proj.output_multiplier", np.ones_like),
    "dropped_mlp_gate": ("*.gate_proj.output_multiplier", np.ones_like),  # gate and up apart on CPU
    "dropped_mlp_down": ("*.down_proj.output_multiplier", np.ones_like),
    "dropped_embedding": ("const.scale", np.ones_like),
    "dropped_lm_head": ("const.logit_scale", np.ones_like),
    "attention_branch_dropped": ("*.o_proj.output_multiplier", np.zeros_like),
    "mamba_branch_dropped": ("*.out_proj.output_multiplier", np.zeros_like),
}


@pytest.mark.parametrize("mutant", FALCON_MUTANTS)
def test_falcon_h1_mutant_multipliers_fail_parity(builds, tmp_path, mutant):
    from mutants import edit_initializers

    pattern, change = FALCON_MUTANTS[mutant]
    package = copy_tree(builds.package(FALCON), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(FALCON)) > 1e-2


def test_falcon_h1_mutant_with_the_other_norm_order_fails_parity(builds, tmp_path):
    """The gated norm's order flipped in the config (normalize y * silu(z), Granite's): a wrong model."""
    checkpoint = copy_tree(builds.checkpoint(FALCON), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "mamba_norm_before_gate": False}))
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False))
    assert parity_error(tmp_path / "pkg", builds.checkpoint(FALCON)) > 1e-2


@pytest.mark.parametrize(
    "overrides",
    [
        dict(mamba_rms_norm=False),  # no gated norm: y * silu(z)
        dict(mamba_norm_before_gate=False, mamba_n_groups=1),  # normalize y * silu(z), one B/C group
        # every bias (key and output multipliers apply after them), a conv without
        dict(mamba_proj_bias=True, projectors_bias=True, attention_bias=True, mlp_bias=True, mamba_conv_bias=False),
        dict(ssm_multipliers=None, mlp_multipliers=None, key_multiplier=1.0, ssm_out_multiplier=1.0),  # fewer Muls
        # dt clamped to [0.4, 1.0] in prompts only, as HF (its mutants are Granite-4.0-H's, test_hybrid.py)
        dict(time_step_limit=(0.4, 1.0)),
    ],
    ids=["no_gated_norm", "norm_after_gate_one_group", "biases", "unit_multipliers", "time_step_limit"],
)
def test_falcon_h1_variants_match_hf(tmp_path, overrides):
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", FALCON, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)
