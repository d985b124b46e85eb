"""Inkling (`inkling_text`, transformers 5.25), what only it has (the checks every family gets are its row in
tests/families.py): every layer carries its KV cache and two conv-state buffers holding its four residual
convolutions' states (the keys' and values' as wide as the widest layer's); prompts shorter than the
convolutions' state; the standard-Attention modes refused in one line; and a planted bug per mechanism that
must break HF parity (docs/coverage.md's Inkling section).

Tiny config (tests/derived_moe_models.py inkling_text): hidden 64, layers 0 and 2 sliding (window 8, 6 query
heads of 8 over 3 kv heads: k | v 48 channels), 1 and 3 full (4 heads of 16 over 2: k | v 64 channels), d_rel 3,
the full layers' extent 12, log scaling from position 4 (alpha 0.3), kernel 4; layer 0 dense, the others the
top 2 of 8 experts beside 2 shared experts. The 70-token prompt reaches past both extents and the floor."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from families import LONG_PROMPT
from mutants import build_planted, copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode, ragged_logits_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.graph import decoder, moe, residual_convs, shared_sink_routing
from gqa_export.graph.masks import StatePadding
from gqa_export.pipeline import BuildOptions, build

INKLING = "inkling_text"
runner = CliRunner()


def _error(package, checkpoint, prompt=LONG_PROMPT, steps: int = 4) -> float:
    tokens, got = ort_prefill_and_decode(package, list(prompt), steps=steps)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max())


def test_every_layer_carries_a_kv_cache_and_its_four_conv_states_in_two_buffers(builds):
    config = json.loads((builds.package(INKLING) / "genai_config.json").read_text())["model"]
    decoder_config = config["decoder"]
    assert config["type"] == "decoder" and "layer_types" not in decoder_config
    assert decoder_config["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    graph = onnx.load(str(builds.package(INKLING) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    for i, (kv_heads, head_dim) in enumerate([(3, 8), (2, 16), (3, 8), (2, 16)]):
        assert shapes[f"past.{i}.conv"] == ["batch_size", 64, 3]  # k | v, the full layers' 2 x 2 x 16 wide
        assert shapes[f"past.{i}.recurrent"] == ["batch_size", 128, 3]  # attention output | MLP output
        assert shapes[f"past_key_values.{i}.key"] == ["batch_size", kv_heads, "past_sequence_length", head_dim]
    ops = [n.op_type for n in graph.node]
    assert ops.count("GroupQueryAttention") == 4 and ops.count("Conv") == 12 and ops.count("MoE") == 3
    attention = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert all(n.input[10] for n in attention)  # the relative bias, GQA's attention_bias
    windows = [next(a.i for a in n.attribute if a.name == "local_window_size") for n in attention]
    assert windows == [8, -1, 8, -1]


@pytest.mark.parametrize("prompt", [(0,), (0, 17)], ids=["one_token", "two_tokens"])
def test_prompts_shorter_than_the_conv_state_match_hf(builds, prompt):
    assert _error(builds.package(INKLING), builds.checkpoint(INKLING), prompt, steps=6) < 1e-4


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    args = ["build", str(builds.checkpoint(INKLING)), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: inkling's residual short-convolution layers keep their state in the GQA graph only: use --attention gqa"
    ]


def test_the_correct_package_matches_hf(builds):
    assert _error(builds.package(INKLING), builds.checkpoint(INKLING)) < 1e-4


# mutant -> (initializer pattern, planted bug) on a copy of the registry package
INITIALIZER_MUTANTS = {
    "relative-bias-dropped": ("*.rel_logits_proj.proj", times(0.0)),
    "key-value-convolution-dropped": ("*.kv_sconv.conv1d.weight", times(0.0)),
    "attention-output-convolution-dropped": ("*.attn_sconv.conv1d.weight", times(0.0)),
    "mlp-output-convolution-dropped": ("*.mlp_sconv.conv1d.weight", times(0.0)),
    "dense-mlp-scale-dropped": ("*.mlp.global_scale", np.ones_like),
    "router-scale-dropped": ("*.mlp.gate.global_scale", np.ones_like),
}


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS)
def test_initializer_mutant_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = INITIALIZER_MUTANTS[mutant]
    broken = copy_package(builds.package(INKLING), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert _error(broken, builds.checkpoint(INKLING)) > 1e-2


def _conv_past_as_zeros(original):
    """The residual convolutions' past read as zeros: their states not carried from step to step."""

    def wrapped(lc, x, modules, past, name):
        zero = lc.b.const(np.zeros((), np.float32), "zero_state")
        return original(lc, x, modules, lc.b.op("Mul", past, zero, name="state_dropped"), name)

    return wrapped


def _without_log_scale(original):
    """The full layers' queries and bias not log-scaled past log_scaling_n_floor."""
    return lambda *args: replace(original(*args), log_scale=None)


def _bias_past_the_extent(original):
    """The relative bias kept past its extent (the clamped last distance's logit instead of zero)."""

    def wrapped(b, *args):
        distances = original(b, *args)
        never = b.const(np.zeros((), np.bool_), "never")
        outside = {e: b.op("And", v, never) for e, v in distances.outside.items()}
        return replace(distances, outside=outside)

    return wrapped


def _shared_unweighted(original):
    """Each shared expert's output added with weight 1, not its routing weight."""

    def wrapped(lc, x, prefix):
        gammas = lc.carried[shared_sink_routing.GAMMAS]
        lc.carried[shared_sink_routing.GAMMAS] = lc.b.op("Add", lc.b.op("Mul", gammas, lc.b.const(
            np.zeros((), np.float32), "zero_gamma")), lc.b.const(np.ones((), np.float32), "unit_gamma"))  # fmt: skip
        return original(lc, x, prefix)

    return wrapped


# mutant -> (module, function, planted bug): the graph built with the function replaced
GRAPH_MUTANTS = {
    "conv-states-not-carried": (residual_convs, "_convolved", _conv_past_as_zeros),
    "log-scale-dropped": (decoder, "relative_distances", _without_log_scale),
    "bias-kept-past-extent": (decoder, "relative_distances", _bias_past_the_extent),
    "shared-experts-unweighted": (moe, "sink_shared_experts", _shared_unweighted),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS)
def test_graph_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    module, name, plant = GRAPH_MUTANTS[mutant]
    broken = build_planted(
        builds.checkpoint(INKLING),
        tmp_path / mutant,
        monkeypatch,
        lambda m: m.setattr(module, name, plant(getattr(module, name))),
    )
    assert _error(broken, builds.checkpoint(INKLING)) > 1e-2


# mutant -> the spec with one mechanism taken out
SPEC_MUTANTS = {
    "embedding-norm-dropped": dict(embedding_norm=None),
    "head-dim-scale-as-sqrt": dict(inverse_head_dim_scale=False),
}


@pytest.mark.parametrize("mutant", SPEC_MUTANTS)
def test_spec_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    broken = build_planted(builds.checkpoint(INKLING), tmp_path / mutant, monkeypatch, SPEC_MUTANTS[mutant], "inkling")
    assert _error(broken, builds.checkpoint(INKLING)) > 1e-2


def _state_at_the_run_end(original):
    """The conv states taken from the run's last K - 1 inputs, a right-padded row's pad positions among them,
    instead of the K - 1 inputs up to its last real token."""

    def wrapped(self, b, width, channels=None):
        shift = b.op("Sub", b.op("Shape", self.keep, start=1, end=2), self.end)  # S - end [B,1]
        if channels is not None:
            shift = b.op("Unsqueeze", shift, b.const([2], "shift_axis", "int64"))
        return b.op("Add", original(self, b, width, channels), shift, name="run_end")

    return wrapped


def test_states_taken_at_the_run_end_fail_the_ragged_batch(builds, tmp_path, monkeypatch):
    """A right-padded row's conv states must end at its last real token (the pads after it convolve only into
    pad positions, whose outputs nothing reads, so only the state shows them)."""
    assert ragged_logits_error(builds.package(INKLING), hf_model(builds.checkpoint(INKLING))) < 1e-4
    monkeypatch.setattr(StatePadding, "conv_state_index", _state_at_the_run_end(StatePadding.conv_state_index))
    out = tmp_path / "state-at-run-end"
    build(BuildOptions(str(builds.checkpoint(INKLING)), out, smoke=False))
    assert ragged_logits_error(out, hf_model(builds.checkpoint(INKLING))) > 1e-2


def test_a_bank_of_another_extent_is_refused_in_one_sentence(tmp_path):
    """A config whose rel_extent differs from the stored banks' width: one line naming the tensor."""
    from moe_models import save_moe

    from gqa_export.errors import InputError

    checkpoint = save_moe(tmp_path / "ck", INKLING, hub_layout=False)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "rel_extent": 10}))
    with pytest.raises(InputError, match=r"rel_logits_proj.proj is \[3, 12\], the config gives \[3, 10\]"):
        build(BuildOptions(str(checkpoint), tmp_path / "out", smoke=False))


def test_an_unpadded_head_keeps_its_first_rows(tmp_path):
    """unpadded_vocab_size: HF drops the logits past it; the package's lm_head keeps only those rows."""
    from moe_models import save_moe

    checkpoint = save_moe(tmp_path / "ck", INKLING, hub_layout=False, unpadded_vocab_size=380)
    out = tmp_path / "out"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    tokens, got = ort_prefill_and_decode(out, list(LONG_PROMPT), steps=2)
    assert got.shape[-1] == 380
    assert float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(LONG_PROMPT))).max()) < 1e-4


def test_a_quantized_kv_cache_is_refused_in_one_line(builds, tmp_path):
    """The quantized-cache GQA path takes no attention_bias, which carries the relative bias."""
    args = ["build", str(builds.checkpoint(INKLING)), "-o", str(tmp_path / "p"), "--kv-cache", "int8", "--no-smoke"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        "error: --kv-cache cannot be combined with GQA's attention bias (attention.bias_op gqa, or the relative "
        "position bias of a family such as Inkling)"
    ]


def test_a_config_with_local_layer_ids_exports_the_same_package(builds, tmp_path):
    """A config that spells the layer kinds as local_layer_ids and the dense prefix as dense_mlp_idx (no layer_types /
    mlp_layer_types; the class derives them) gives the registry package byte for byte."""
    import shutil

    checkpoint = tmp_path / "ck"
    shutil.copytree(builds.checkpoint(INKLING), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    assert config.pop("layer_types") == ["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"]
    assert config.pop("mlp_layer_types") == ["dense", "sparse", "sparse", "sparse"]
    (checkpoint / "config.json").write_text(json.dumps({**config, "local_layer_ids": [0, 2], "dense_mlp_idx": 1}))
    build(BuildOptions(str(checkpoint), tmp_path / "out", smoke=False))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "out" / name).read_bytes() == (builds.package(INKLING) / name).read_bytes(), name


def test_without_log_scaling_matches_hf(tmp_path):
    """log_scaling_n_floor unset (the class's default): no log scale in the graph, still HF's logits."""
    from moe_models import save_moe

    checkpoint = save_moe(tmp_path / "ck", INKLING, hub_layout=False, log_scaling_n_floor=None)
    out = tmp_path / "out"
    build(BuildOptions(str(checkpoint), out, smoke=False))
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    assert not any("log_scale" in n.name for n in graph.node)
    assert _error(out, checkpoint) < 1e-4
