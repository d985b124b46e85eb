"""ZAYA1 (transformers 5.25), what only it has (the checks every family gets are its row in
tests/families.py): every layer carries its KV cache, a conv state of q|k projections and a
delayed-value state; prompts shorter than the conv state; the standard-Attention modes refused in
one line; and a planted bug per mechanism that must break HF parity (docs/coverage.md's ZAYA section):
the delayed value dropped, the conv state not carried (read as zeros), the value state not carried,
the router stream not handed on, the skip expert's weight left on expert 0 (not masked), the key
temperature dropped, the affine residual maps dropped.

Tiny config (tests/derived_moe_models.py zaya): hidden 64, 4 query / 2 kv heads of 16, 3 layers
(layer 1 sliding, window 8), depthwise kernel 2 then grouped kernel 3 over (4 + 2) x 16 = 96
channels: a 3-step conv state; values 2 x 16, half delayed: a [1, 16] state; the top 1 of 6 experts
or the skip class, router stream 24 wide."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from families import LONG_PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.graph import cca, stream_router
from gqa_export.pipeline import BuildOptions, build

ZAYA = "zaya"
runner = CliRunner()


def _error(package, checkpoint, prompt=LONG_PROMPT, steps: int = 4) -> float:
    tokens, got = ort_prefill_and_decode(package, list(prompt), steps=steps)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max())


def test_every_layer_carries_a_kv_cache_a_conv_and_a_value_state(builds):
    config = json.loads((builds.package(ZAYA) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and "layer_types" not in decoder
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    graph = onnx.load(str(builds.package(ZAYA) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    for i in range(3):
        assert shapes[f"past.{i}.conv"] == ["batch_size", 96, 3]
        assert shapes[f"past.{i}.recurrent"] == ["batch_size", 1, 16]
        assert shapes[f"past_key_values.{i}.key"] == ["batch_size", 2, "past_sequence_length", 16]
    ops = [n.op_type for n in graph.node]
    assert ops.count("GroupQueryAttention") == ops.count("MoE") == 3 and ops.count("Conv") == 6


@pytest.mark.parametrize("prompt", [(0,), (0, 17)], ids=["one_token", "two_tokens"])
def test_prompts_shorter_than_the_conv_state_match_hf(builds, prompt):
    assert _error(builds.package(ZAYA), builds.checkpoint(ZAYA), prompt, steps=6) < 1e-4


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    args = ["build", str(builds.checkpoint(ZAYA)), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: zaya's compressed convolutional attention layers keep their state in the GQA graph only: "
        "use --attention gqa"
    ]


# mutant -> (initializer pattern, planted bug) on a copy of the registry package
INITIALIZER_MUTANTS = {
    "delayed-value-dropped": ("*.v_proj_delayed.weight", times(0.0)),
    "router-stream-dropped": ("*.mlp.gate.router_states_scale", times(0.0)),
    "key-temperature-dropped": ("*.qk_norm.temp", np.ones_like),
    "residual-maps-dropped": ("*.post_mlp_residual_scale.residual_scale", np.ones_like),
}


def test_the_correct_package_matches_hf(builds):
    assert _error(builds.package(ZAYA), builds.checkpoint(ZAYA)) < 1e-4


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS)
def test_initializer_mutant_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = INITIALIZER_MUTANTS[mutant]
    broken = copy_package(builds.package(ZAYA), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert _error(broken, builds.checkpoint(ZAYA)) > 1e-2


def _past_as_zeros(original, index: int):
    """A graph function whose `index`-th argument (a past state) is read as zeros: the state not carried."""

    def wrapped(lc, *args):
        args = list(args)
        zero = lc.b.const(np.zeros((), np.float32), "zero_state")
        args[index] = lc.b.op("Mul", args[index], zero, name="state_dropped")
        return original(lc, *args)

    return wrapped


def _skip_unmasked(original):
    """The skip class's weight added to expert 0 (HF masks it to index 0 with weight 0)."""

    def wrapped(lc, prefix, logits, moe):
        dense = original(lc, prefix, logits, moe)
        b = lc.b
        probs = b.op("Softmax", logits, axis=-1)
        skip = b.op("Slice", probs, b.const([moe.experts], "s0", "int64"), b.const([moe.experts + 1], "s1", "int64"),
                    b.const([-1], "s2", "int64"))  # fmt: skip
        none = b.op("Equal", b.op("ReduceSum", dense, b.const([-1], "z3", "int64"), keepdims=1),
                    b.const(np.zeros((), np.float32), "z4"))  # fmt: skip
        onehot = b.const(np.eye(moe.experts, dtype=np.float32)[0], "expert0")
        return b.op("Add", dense, b.op("Mul", b.op("Mul", skip, onehot), b.op("Cast", none, to=ir.DataType.FLOAT)))

    return wrapped


GRAPH_MUTANTS = {
    "conv-state-not-carried": (cca, "_qk_convolutions", lambda f: _past_as_zeros(f, 1)),
    "value-state-not-carried": (cca, "_delayed_value", lambda f: _past_as_zeros(f, 1)),
    "skip-expert-not-masked": (stream_router, "skip_expert_routing", _skip_unmasked),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS)
def test_graph_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    module, name, plant = GRAPH_MUTANTS[mutant]
    monkeypatch.setattr(module, name, plant(getattr(module, name)))
    if module is stream_router:  # graph/dense_routing.py imported the name
        from gqa_export.graph import dense_routing

        monkeypatch.setattr(dense_routing, name, getattr(module, name))
    out = tmp_path / mutant
    build(BuildOptions(str(builds.checkpoint(ZAYA)), out, smoke=False))
    assert _error(out, builds.checkpoint(ZAYA)) > 1e-2


def test_a_delayed_value_bias_is_refused_in_one_sentence(tmp_path):
    """With attention_bias HF's first delayed value is v_proj_delayed's bias; the state starts at zeros."""
    from moe_models import save_moe

    from gqa_export.errors import InputError

    checkpoint = save_moe(tmp_path / "biased", ZAYA, attention_bias=True)
    with pytest.raises(InputError, match="v_proj_delayed has a bias"):
        build(BuildOptions(str(checkpoint), tmp_path / "out", smoke=False))
