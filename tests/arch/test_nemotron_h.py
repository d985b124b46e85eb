"""Nemotron-H, what only it has among the hybrid decoders (tests/arch/test_hybrid.py has the state checks
they share): each layer is one block behind one norm and residual, chosen by the config's pattern
(a Mamba2 mixer, NoPE attention, a squared-ReLU MLP or a mixture of ungated squared-ReLU experts);
HF clamps Mamba2's dt in its chunked prompt form only (transformers < 5.25: floored at time_step_min,
>= 5.25: with time_step_limit; the export follows the installed one); a pattern the weights do not
fit is refused. The checks every family gets are its rows in tests/families.py (nemotron_h,
nemotron_h_moe)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT
from hybrid_checks import assert_variant_matches_hf
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode, parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()


# Nemotron-H (tests/dense_models.py nemotron_h): pattern M * - M -, each layer one block behind one norm;
# Mamba2 at 0 and 3 (K 4 over 128 + 2 x 2 x 16 = 192 channels, SSM state [4, 16, 32], dt floored at
# time_step_min 0.5 in prompts only), NoPE GQA at 1, squared-ReLU MLPs at 2 and 4
NEMOTRON_H = "nemotron_h"


def test_nemotron_h_layers_hold_one_block_each(builds):
    config = json.loads((builds.package(NEMOTRON_H) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    # the layers the runtime binds something for: up to layer 3 (layer 4, an MLP, carries nothing)
    assert config["type"] == "decoder" and decoder["num_hidden_layers"] == 4 and "layer_types" not in decoder
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    graph = onnx.load(str(builds.package(NEMOTRON_H) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert sorted(n for n in shapes if n.startswith("past")) == [
        "past.0.conv", "past.0.recurrent", "past.3.conv", "past.3.recurrent",
        "past_key_values.1.key", "past_key_values.1.value",
    ]  # fmt: skip
    assert shapes["past.3.conv"] == ["batch_size", 3, 192] and shapes["past.3.recurrent"] == ["batch_size", 4, 16, 32]
    norms = [n for n in graph.node if n.op_type.endswith("SimplifiedLayerNormalization") and "gated" not in n.name]
    assert len(norms) == 5 + 1  # one per layer (a mixer-and-MLP layer has two) and the final norm
    report = json.loads(runner.invoke(app, ["inspect", str(builds.package(NEMOTRON_H)), "--json"]).stdout)
    assert (
        report["findings"] == []
        and report["summary"]["recurrent_state_bytes_per_row"] == 2 * (3 * 192 + 4 * 16 * 32) * 4
    )


def _edit_node(package: Path, suffix: str, edit) -> None:
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    nodes = [node for node in model.graph.node if node.name.endswith(suffix)]
    assert nodes, suffix
    for node in nodes:
        edit(node)
    onnx.save(model, str(package / "model.onnx"))


@pytest.mark.parametrize(
    ("suffix", "edit", "broken"),
    [
        ("relu2", lambda n: setattr(n, "op_type", "Max"), "prompt"),  # relu(x) instead of relu(x)^2
        ("prompt_dt_floor", lambda n: n.input.__setitem__(1, n.input[2]), "prompt"),  # no floor at all
        ("prompt_dt_floor", lambda n: n.input.__setitem__(2, n.input[1]), "decode"),  # the floor in decode steps too
    ],
    ids=["relu", "no_dt_floor", "dt_floor_always"],
)
def test_nemotron_h_mutant_graph_fails_parity(builds, tmp_path, suffix, edit, broken):
    """The squared ReLU, and the dt floor HF applies to prompts (its chunked form) but not to its
    single-token steps: a graph that flattens either fails where HF's two forms differ."""
    package = copy_package(builds.package(NEMOTRON_H), tmp_path / "pkg")
    _edit_node(package, suffix, edit)
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    errors = np.abs(got - hf_logits(hf_model(builds.checkpoint(NEMOTRON_H)), tokens, len(PROMPT))).max(axis=-1)
    prompt, decode = errors[: len(PROMPT)].max(), errors[len(PROMPT) :].max()
    if broken == "prompt":
        assert prompt > 1e-2, prompt
    else:  # the prompt is HF's chunked form either way
        assert prompt < 1e-4 and decode > 1e-2, (prompt, decode)


def test_nemotron_h_mutant_mlp_layer_norm_fails_parity(builds, tmp_path):
    """An MLP-only layer reads its input through its own one norm (layers.2.norm), scaled x1.5 here."""
    package = copy_package(builds.package(NEMOTRON_H), tmp_path / "pkg")
    assert edit_initializers(package, "*layers.2.norm.weight", times(1.5)), "layers.2.norm matched nothing"
    assert parity_error(package, builds.checkpoint(NEMOTRON_H)) > 1e-2


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda types: types[:-1], "config.json says num_hidden_layers 4 but the checkpoint holds 5 layers"),
        (lambda types: [*types[:-1], "moe"], "'backbone.layers.4.mixer.gate.weight' is missing"),
    ],
    ids=["dropped_pattern_entry", "moe_entry_without_experts"],
)
def test_nemotron_h_pattern_mismatch_is_refused_in_one_line(builds, tmp_path, edit, error):
    checkpoint = copy_package(builds.checkpoint(NEMOTRON_H), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    config["layers_block_type"] = edit(config["layers_block_type"])
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and error in errors[0] and len(errors[0]) < 300, errors
    assert not (tmp_path / "p").exists()


def _hub_spelling(checkpoint: Path) -> None:
    """config.json as the hub writes it: hybrid_override_pattern and num_hidden_layers, no layers_block_type."""
    config = json.loads((checkpoint / "config.json").read_text())
    pattern = "".join(
        {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}[t] for t in config["layers_block_type"]
    )
    config.pop("layers_block_type")
    (checkpoint / "config.json").write_text(
        json.dumps({**config, "hybrid_override_pattern": pattern, "num_hidden_layers": len(pattern)})
    )


@pytest.mark.parametrize(
    ("overrides", "edit"),
    [
        ({}, _hub_spelling),
        ({"experts": True}, _hub_spelling),  # M*E-ME: the E entries spelled as on the hub
        # every bias (in_proj/out_proj, MLP) but the conv's, one B/C group, the default dt floor 0.001
        (dict(use_conv_bias=False, use_bias=True, mlp_bias=True, n_groups=1, time_step_min=0.001), None),
    ],
    ids=["hub_pattern", "hub_pattern_experts", "biases_one_group"],
)
def test_nemotron_h_variants_match_hf(tmp_path, overrides, edit):
    from dense_models import NEMOTRON_H_MOE as EXPERTS
    from dense_models import save_dense

    overrides = EXPERTS if overrides.get("experts") else overrides
    checkpoint = save_dense(tmp_path / "ckpt", NEMOTRON_H, **overrides)
    if edit is not None:
        edit(checkpoint)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    assert_variant_matches_hf(package, checkpoint)


@pytest.fixture(scope="module")
def disagreeing_clamp(tmp_path_factory) -> Path:
    """time_step_min 0.5 beside time_step_limit (0.2, 0.35): transformers < 5.25 floors dt at 0.5,
    >= 5.25 clamps it into [0.2, 0.35], so HF's logits depend on the installed release."""
    from dense_models import save_dense

    return save_dense(tmp_path_factory.mktemp("clamp") / "ckpt", NEMOTRON_H, time_step_limit=(0.2, 0.35))


@pytest.mark.parametrize("era", ["installed", "other"])
def test_nemotron_h_dt_clamp_follows_the_installed_transformers(disagreeing_clamp, tmp_path, monkeypatch, era):
    """transformers 5.25 rewrote Nemotron-H's mixer: its prompt clamp is time_step_limit, no longer
    (time_step_min, inf). The export reads the clamp the installed transformers applies and matches
    its HF; built as the other release computes it, the same checkpoint fails parity."""
    from gqa_export.model import layer_kinds

    installed = layer_kinds.transformers_version()
    if era == "other":  # the other side of 5.25
        monkeypatch.setattr(layer_kinds, "transformers_version", lambda: (5, 24) if installed >= (5, 25) else (5, 25))
    package = tmp_path / "pkg"
    build(BuildOptions(str(disagreeing_clamp), package, smoke=False))
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    ceilings = [n for n in graph.node if n.name.endswith("prompt_dt_ceiling")]
    if era == "installed":
        assert bool(ceilings) == (installed >= (5, 25))
        assert_variant_matches_hf(package, disagreeing_clamp)
    else:
        assert parity_error(package, disagreeing_clamp) > 1e-2


# Nemotron-H with experts (tests/dense_models.py NEMOTRON_H_MOE): pattern M * E - M E; at 2 and 5, 8 ungated
# squared-ReLU experts of 32 (up [32, 64], down [64, 32] each), the top 2 within the 2 best of 4 groups
NEMOTRON_H_MOE = "nemotron_h_moe"


def test_nemotron_h_experts_are_two_plain_matmuls_over_every_expert(builds):
    """No MoE op (none has squared ReLU): each sparse layer's experts are one MatMul into every
    expert's up rows [64, 8 x 32] and one out of their down columns [8 x 32, 64]; the router, the
    shared expert and the state layers are as without experts."""
    package = builds.package(NEMOTRON_H_MOE)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert not [n for n in graph.node if n.op_type in ("MoE", "QMoE")]
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for i in (2, 5):
        assert shapes[f"backbone.layers.{i}.mixer.experts.up_stacked"] == [64, 8 * 32]
        assert shapes[f"backbone.layers.{i}.mixer.experts.down_side_by_side"] == [8 * 32, 64]
    assert not [name for name in shapes if "layers.3.mixer.experts" in name or "layers.1.mixer.experts" in name]
    decoder = json.loads((package / "genai_config.json").read_text())["model"]["decoder"]
    assert decoder["num_hidden_layers"] == 5  # the last layer with a state is 4 (layer 5 holds experts only)


def _zero_correction_bias(package: Path) -> None:
    assert edit_initializers(package, "*mixer.gate.e_score_correction_bias", times(0))


def _no_group_limit(package: Path) -> None:
    assert edit_initializers(package, "const.groups_kept", times(2))  # all 4 groups kept instead of 2


def _experts_shifted(package: Path) -> None:
    """Expert e's up rows given to expert e + 1 (the routing weights meet the wrong experts)."""
    assert edit_initializers(package, "*experts.up_stacked", lambda v: np.roll(v, 32, axis=1))


def _relu_experts(package: Path) -> None:
    _edit_node(package, "experts/relu2", lambda n: setattr(n, "op_type", "Max"))  # relu(x) instead of relu(x)^2


@pytest.mark.parametrize(
    "mutate",
    [_zero_correction_bias, _no_group_limit, _experts_shifted, _relu_experts],
    ids=["no_correction_bias", "no_group_limit", "experts_shifted", "relu_experts"],
)
def test_nemotron_h_mutant_experts_fail_parity(builds, tmp_path, mutate):
    """The biased choice, the group limit, the expert order of the stacked weights and the experts'
    squared ReLU each move the logits far past the 1e-4 the export meets (measured 1.8-3.2)."""
    package = copy_package(builds.package(NEMOTRON_H_MOE), tmp_path / "pkg")
    mutate(package)
    assert parity_error(package, builds.checkpoint(NEMOTRON_H_MOE)) > 0.5


def test_nemotron_h_stacked_latent_experts_match_hf(tmp_path):
    """transformers' stacked expert tensors (experts.up_proj [E, I, D]) under `model.`, experts in a
    24-wide latent space between fc1/fc2_latent_proj, every MLP bias, one group, top-k weights not
    renormalized and not scaled."""
    from dense_models import NEMOTRON_H_MOE as OVERRIDES
    from dense_models import build_model
    from tiny_models import save_tokenizer

    checkpoint = tmp_path / "ckpt"
    overrides = dict(OVERRIDES, moe_latent_size=24, mlp_bias=True, n_group=1, topk_group=1)
    model = build_model("nemotron_h", **{**overrides, "norm_topk_prob": False, "routed_scaling_factor": 1.0})
    model.save_pretrained(checkpoint, save_original_format=False)
    save_tokenizer(checkpoint, vocab_size=384)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert {t.name: list(t.dims) for t in graph.initializer}["model.layers.2.mixer.experts.up_stacked"] == [24, 256]
    assert_variant_matches_hf(package, checkpoint)
