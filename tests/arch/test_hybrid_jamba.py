"""Jamba's Mamba (v1) layers, what only they have (the checks every family gets are its row in
tests/families.py, the state checks shared with the other hybrids are in tests/arch/test_hybrid.py): the
state shapes and the expert grid in the graph, prompts shorter than the conv kernel, and mutants of
the mechanisms the Mamba mixer adds (the per-channel, per-state decay, the dt/B/C norms, the D skip,
the unnormalized top-k router) that fail parity (docs/hybrid-state.md §8.3)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree
from reference import hf_logits, hf_model, ort_prefill_and_decode, parity_error
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


# Jamba (tests/dense_models.py jamba): Mamba at layers 0, 2 and 4, NoPE GQA at 1 and 3, experts at 0
# and 3; K 4 over 128 channels, SSM state [128 channels, state 16, 1]
JAMBA = "jamba"


def test_jamba_graph_carries_both_states_and_experts_on_the_grid(builds):
    config = json.loads((builds.package(JAMBA) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and "layer_types" not in decoder  # RecurrentState binds (§8.3)
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    graph = onnx.load(str(builds.package(JAMBA) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert [shapes[f"past.{i}.conv"] for i in (0, 2, 4)] == [["batch_size", 3, 128]] * 3
    assert [shapes[f"past.{i}.recurrent"] for i in (0, 2, 4)] == [["batch_size", 128, 16, 1]] * 3
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        f"past_key_values.{i}.{kv}" for i in (1, 3) for kv in ("key", "value")
    ]
    ssm = [n for n in graph.node if n.op_type == "LinearAttention"]
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in ssm[0].attribute}
    assert len(ssm) == 3 and (attributes["q_num_heads"], attributes["kv_num_heads"]) == (1, 128)
    assert sorted(n.name.split("/")[2] for n in graph.node if n.op_type == "MoE") == ["layers.0", "layers.3"]
    report = json.loads(runner.invoke(app, ["inspect", str(builds.package(JAMBA)), "--json"]).stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 3 * (3 * 128 + 128 * 16) * 4
    assert report["findings"] == []


@pytest.mark.parametrize("prompt", [(0,), (0, 17, 45)], ids=["one_token", "shorter_than_the_kernel"])
def test_jamba_short_prompts_match_hf(builds, prompt):
    """The conv state still zero-padded after the prompt, then 6 decode steps (the registry row's
    prompt is 70 tokens)."""
    tokens, got = ort_prefill_and_decode(builds.package(JAMBA), list(prompt), steps=6)
    np.testing.assert_allclose(got, hf_logits(hf_model(builds.checkpoint(JAMBA)), tokens, len(prompt)), atol=1e-4)


def _bypass(node_suffix: str):
    """A graph edit: the nodes named ...node_suffix left out (their consumers read their first input)."""

    def edit(model: onnx.ModelProto) -> None:
        for node in [n for n in model.graph.node if n.name.endswith(node_suffix)]:
            for other in model.graph.node:
                other.input[:] = [node.input[0] if i == node.output[0] else i for i in other.input]

    return edit


def _swap_split_outputs(node_suffix: str, a: int, b: int):
    def edit(model: onnx.ModelProto) -> None:
        for node in [n for n in model.graph.node if n.name.endswith(node_suffix)]:
            node.output[a], node.output[b] = node.output[b], node.output[a]

    return edit


def _renormalize_top_k(model: onnx.ModelProto) -> None:
    for node in [n for n in model.graph.node if n.op_type == "MoE"]:
        next(a for a in node.attribute if a.name == "normalize_routing_weights").i = 1


JAMBA_GRAPH_MUTANTS = {
    "dt_layernorm_dropped": _bypass("mamba/dt_layernorm"),
    "b_and_c_swapped": _swap_split_outputs("split_dt_b_c", 1, 2),
    "x_and_z_swapped": _swap_split_outputs("split_x_z", 0, 1),
    "top_k_renormalized": _renormalize_top_k,  # Jamba keeps the top-k softmax weights as they are
}


@pytest.mark.parametrize("edit", JAMBA_GRAPH_MUTANTS.values(), ids=JAMBA_GRAPH_MUTANTS.keys())
def test_jamba_mutant_graph_fails_parity(builds, tmp_path, edit):
    package = copy_tree(builds.package(JAMBA), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    edit(model)
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(JAMBA)) > 1e-2


@pytest.mark.parametrize(
    ("pattern", "change"),
    [
        (
            "*mamba.decay_scale",
            lambda a: np.repeat(a[:, :1], a.shape[1], axis=1),
        ),  # one decay per channel, not per state
        ("*mamba.decay_scale", lambda a: a * 1.5),
        ("*mamba.D", lambda d: d * 0),  # the D skip left out
    ],
    ids=["decay_shared_across_the_state", "decay_scaled", "d_skip_dropped"],
)
def test_jamba_mutant_initializers_fail_parity(builds, tmp_path, pattern, change):
    from mutants import edit_initializers

    package = copy_tree(builds.package(JAMBA), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(JAMBA)) > 1e-2


@pytest.mark.parametrize(
    "overrides",
    [
        dict(num_experts=1),  # one expert: a dense MLP on every layer, whatever the grid says
        # in_proj / out_proj biases, a conv without, attention first, experts on every other layer
        dict(mamba_proj_bias=True, mamba_conv_bias=False, attn_layer_offset=0, expert_layer_period=2),
    ],
    ids=["dense", "projection_biases_attention_first"],
)
def test_jamba_variants_match_hf(tmp_path, overrides):
    from dense_models import save_dense

    from gqa_export.pipeline import BuildOptions, build

    checkpoint = save_dense(tmp_path / "ckpt", JAMBA, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)
