"""The state-space families' own checks (tests/state_space_models.py; the checks every family gets
are their rows in tests/families.py): the states in the graph and genai_config, config variants
against HF, and mutants of the mechanisms each family adds that fail parity (docs/hybrid-state.md
§8.9, docs/coverage.md §4)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree
from reference import parity_error

from gqa_export.pipeline import BuildOptions, build

# Bamba (tests/state_space_models.py bamba): Mamba2 at layers 0, 2 and 3 (4 heads of 32, 2 groups,
# state 16, K 4 over 128 + 2 x 2 x 16 = 192 channels), GQA with RoPE on 8 of 16 channels at 1
BAMBA = "bamba"


def _shapes(graph: onnx.GraphProto) -> dict[str, list]:
    return {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}


def test_bamba_graph_carries_both_states_beside_one_kv_cache(builds):
    config = json.loads((builds.package(BAMBA) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and "layer_types" not in decoder  # the RecurrentState binds (§8.9)
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    shapes = _shapes(onnx.load(str(builds.package(BAMBA) / "model.onnx"), load_external_data=False).graph)
    assert [shapes[f"past.{i}.conv"] for i in (0, 2, 3)] == [["batch_size", 3, 192]] * 3
    assert [shapes[f"past.{i}.recurrent"] for i in (0, 2, 3)] == [["batch_size", 4, 16, 32]] * 3
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value"
    ]  # fmt: skip


def _rope_dropped(values: np.ndarray) -> np.ndarray:
    """cos 1 and sin 0 at every position: the attention layer without RoPE (Jamba's NoPE)."""
    return np.ones_like(values) if values.max() > 0.999 else np.zeros_like(values)


BAMBA_MUTANTS = {
    "rope_dropped": (("*_cache", _rope_dropped),),
    # the gated norm over the whole inner width, not per group of I / G (4.57's Mamba2 norm)
    "gated_norm_not_per_group": (
        ("const.groups*", lambda shape: np.array([0, 0, 1, shape[2] * shape[3]])),
        ("const.unit_weight*", lambda ones: np.ones(ones.size * 2, ones.dtype)),
    ),
    "d_skip_dropped": (("*mamba.D", lambda d: d * 0),),
}


@pytest.mark.parametrize("edits", BAMBA_MUTANTS.values(), ids=BAMBA_MUTANTS.keys())
def test_bamba_mutant_fails_parity(builds, tmp_path, edits):
    from mutants import edit_initializers

    package = copy_tree(builds.package(BAMBA), tmp_path / "pkg")
    for pattern, change in edits:
        assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(BAMBA)) > 1e-2


@pytest.mark.parametrize(
    "overrides",
    [
        # every bias (attention, MLP, in_proj / out_proj) and no conv bias, one group, attention first
        dict(attention_bias=True, mlp_bias=True, mamba_proj_bias=True, mamba_conv_bias=False, mamba_n_groups=1,
             attn_layer_indices=[0, 3]),
        # dt clamped to [0.4, 1.0] in prompts only, as HF's chunked form does (docs/hybrid-state.md §8.2)
        dict(time_step_limit=(0.4, 1.0)),
    ],
    ids=["biases_one_group_attention_first", "time_step_limit"],
)  # fmt: skip
def test_bamba_variants_match_hf(tmp_path, overrides):
    from state_space_models import save_state_space

    checkpoint = save_state_space(tmp_path / "ckpt", BAMBA, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)
