"""RecurrentGemma's own checks (tests/state_space_models.py recurrent_gemma; the checks every family gets
are its row in tests/families.py): the states, the local window and genai_config in the package, a
config variant against HF, the one-line refusal of a width the gate blocks do not divide, and
mutants of each mechanism the family adds that fail parity (docs/hybrid-state.md §8.15).

The tiny checkpoint: RG-LRU at layers 0 and 2 (W = hidden = 48, gate blocks of 16, K 4), local MQA
at 1 (3 heads of 16, RoPE on 8 channels, window 8: shorter than the registry's 14-token prompt that
parity_error runs), logits soft-capped at 2, embeddings times bfloat16(sqrt(48)) = 6.9375.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree, refused_build_errors
from mutants import edit_initializers, times
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()
FAMILY = "recurrent_gemma"


def test_package_carries_both_states_beside_one_windowed_kv_cache(builds):
    package = builds.package(FAMILY)
    config = json.loads((package / "genai_config.json").read_text())["model"]
    assert config["type"] == "decoder" and "layer_types" not in config["decoder"]  # the RecurrentState binds
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert [shapes[f"past.{i}.conv"] for i in (0, 2)] == [["batch_size", 3, 48]] * 2
    assert [shapes[f"past.{i}.recurrent"] for i in (0, 2)] == [["batch_size", 48, 1, 1]] * 2
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value"
    ]  # fmt: skip
    ops = {n.op_type: n for n in graph.node}
    lru = {a.name: onnx.helper.get_attribute_value(a) for a in ops["LinearAttention"].attribute}
    assert (lru["q_num_heads"], lru["kv_num_heads"], lru["update_rule"]) == (1, 48, b"gated")
    gqa = {a.name: onnx.helper.get_attribute_value(a) for a in ops["GroupQueryAttention"].attribute}
    assert gqa["local_window_size"] == 8
    report = json.loads(runner.invoke(app, ["inspect", str(package), "--json"]).stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 2 * (3 * 48 + 48) * 4
    assert report["findings"] == []


def _bypass(suffix: str):
    """A graph edit: the node named ...suffix left out (its consumers read its first input)."""

    def edit(model: onnx.ModelProto) -> None:
        for node in [n for n in model.graph.node if n.name.endswith(suffix)]:
            for other in model.graph.node:
                other.input[:] = [node.input[0] if i == node.output[0] else i for i in other.input]

    return edit


def _full_attention(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            next(a for a in node.attribute if a.name == "local_window_size").i = -1


GRAPH_MUTANTS = {
    "sqrt_one_minus_a_square_dropped": _bypass("rglru/normalized_x"),  # x * i, not x * i * sqrt(1 - a^2)
    "reset_skipped": _bypass("rglru/reset"),  # sqrt(1 - a^2) at position 0 too
    "window_dropped": _full_attention,  # the 14-token prompt attends past the window of 8
    "gelu_branch_dropped": _bypass("rglru/Gelu"),  # linear_y's output without its gelu
}


@pytest.mark.parametrize("edit", GRAPH_MUTANTS.values(), ids=GRAPH_MUTANTS.keys())
def test_mutant_graph_fails_parity(builds, tmp_path, edit):
    package = copy_tree(builds.package(FAMILY), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    edit(model)
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(FAMILY)) > 1e-2


WEIGHT_MUTANTS = {
    "conv_scaled": ("*conv_1d.weight", times(1.5), 1e-2),
    "decay_scaled": ("*log_decay_scale", times(1.5), 1e-2),  # -8 softplus(c) off by half
    "gate_blocks_transposed": ("*gate_weight", lambda w: np.ascontiguousarray(np.swapaxes(w, -1, -2)), 1e-2),
    "gate_blocks_reversed": ("*input_gate_weight", lambda w: np.ascontiguousarray(w[::-1]), 1e-2),
    "soft_cap_lifted": ("*final_softcap", times(100.0), 1e-2),  # tanh(x / 200) * 200 ~ x: no cap
    # sqrt(48) in float32 instead of bfloat16's 6.9375 (0.13 % apart): 6.9e-3 measured, 70x the tolerance
    "embedding_scale_not_bfloat16": ("const.scale", lambda v: np.full_like(v, math.sqrt(48)), 1e-3),
}


@pytest.mark.parametrize(("pattern", "change", "bound"), WEIGHT_MUTANTS.values(), ids=WEIGHT_MUTANTS.keys())
def test_mutant_initializers_fail_parity(builds, tmp_path, pattern, change, bound):
    package = copy_tree(builds.package(FAMILY), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(FAMILY)) > bound


def test_variant_matches_hf(tmp_path):
    """The 2B checkpoint's attention path: heads of 32 with RoPE on 16 channels, which GQA's fused RoPE
    takes (do_rotary; the registry row's 8 of 16 go through plain ops). Also attention first
    (block_types repeat: attention, recurrent, attention), every head its kv head, q/k/v biases, a
    conv of width 3, a window of 4, gate blocks of 32."""
    from state_space_models import save_state_space

    overrides = dict(
        block_types=["attention", "recurrent"], hidden_size=64, lru_width=64, num_attention_heads=2,
        num_key_value_heads=2, attention_bias=True, conv1d_width=3, attention_window_size=4,
    )  # fmt: skip
    checkpoint = save_state_space(tmp_path / "ckpt", FAMILY, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    gqa = [n for n in onnx.load(str(package / "model.onnx"), load_external_data=False).graph.node
           if n.op_type == "GroupQueryAttention"]  # fmt: skip
    assert [a.i for n in gqa for a in n.attribute if a.name == "do_rotary"] == [1, 1]
    assert_variant_matches_hf(package, checkpoint)


def test_width_the_gate_blocks_do_not_divide_is_refused_in_one_line(builds, tmp_path):
    """lru_width 50 over 3 heads: one line, exit 2, nothing written (before any weight is read)."""
    errors = refused_build_errors(builds.checkpoint(FAMILY), tmp_path, {"lru_width": 50})
    assert errors == ["error: recurrent_gemma: lru_width 50 does not divide among 3 gate blocks (heads)"]
