"""Inkling2 (`inkling2_text`, transformers 5.25), what only it has beyond Inkling (tests/arch/test_inkling.py; the
checks every family gets are its row in tests/families.py): prompts shorter than the convolutions' state, the
standard-Attention modes refused in one line, and a planted bug per mechanism that must break HF parity
(docs/coverage.md's Inkling section, Inkling2): block attention residuals, L2 clips and their scales, per-token
sinks, the output gate, per-token convolution taps, scaled convolution sums, soft-capped experts.

Tiny config (tests/derived_moe_models.py inkling2_text): Inkling's tiny layers (sliding / full / sliding / full), blocks
of 2 layers, clip thresholds 3 (queries, keys) and 1 (relative states), experts soft-capped at 1 and 1.5, logits at 3,
a 380-row head."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from families import LONG_PROMPT
from mutants import build_planted, copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.arch import SPECS
from gqa_export.cli import app
from gqa_export.graph import clipped_attention, decoder, moe, residual_convs

INKLING2 = "inkling2_text"
runner = CliRunner()


def _error(package, checkpoint, prompt=LONG_PROMPT, steps: int = 4) -> float:
    tokens, got = ort_prefill_and_decode(package, list(prompt), steps=steps)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(prompt))).max())


def test_the_correct_package_matches_hf(builds):
    assert _error(builds.package(INKLING2), builds.checkpoint(INKLING2)) < 1e-4


@pytest.mark.parametrize("prompt", [(0,), (0, 17)], ids=["one_token", "two_tokens"])
def test_prompts_shorter_than_the_conv_state_match_hf(builds, prompt):
    assert _error(builds.package(INKLING2), builds.checkpoint(INKLING2), prompt, steps=6) < 1e-4


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    args = ["build", str(builds.checkpoint(INKLING2)), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: inkling2's residual short-convolution layers keep their state in the GQA graph only: "
        "use --attention gqa"
    ]


# mutant -> (initializer pattern, planted bug) on a copy of the registry package
INITIALIZER_MUTANTS = {
    "attention-block-queries-zeroed": ("*.attention_input.query", times(0.0)),
    "mlp-block-queries-zeroed": ("*.mlp_input.query", times(0.0)),
    "final-block-query-zeroed": ("model.final_input.query", times(0.0)),
    "query-clip-scale-at-one": ("*.q_proj.norm.scale", np.ones_like),
    "relative-clip-scale-at-one": ("*.relative_position_bias.norm.scale", np.ones_like),
    "static-taps-zeroed": ("*.sconv.static_weight", times(0.0)),
    "dynamic-taps-dropped": ("*.sconv.weight_proj.weight", times(0.0)),
    "sinks-dropped": ("*.sink_proj.weight", times(0.0)),
    "output-gate-dropped": ("*.o_proj.gate_proj.weight", times(0.0)),
    "relative-bank-zeroed": ("*.relative_position_bias.proj", times(0.0)),
}


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS)
def test_initializer_mutant_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = INITIALIZER_MUTANTS[mutant]
    broken = copy_package(builds.package(INKLING2), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert _error(broken, builds.checkpoint(INKLING2)) > 1e-2


def _unclipped(original):
    """The L2 clips never binding (a threshold no head reaches)."""
    return lambda lc, x, threshold, tag, scale=None: original(lc, x, 1e9, tag, scale)


def _tap_states_dropped(original):
    """The per-token taps' past read as zeros: the full layers' key and value states not carried."""

    def wrapped(lc, x, taps, dynamic_input, past, name):
        zero = lc.b.const(np.zeros((), np.float32), "zero_state")
        return original(lc, x, taps, dynamic_input, lc.b.op("Mul", past, zero, name="state_dropped"), name)

    return wrapped


def _plain_swiglu(lc, gate, up):
    """The experts' SwiGLU without its softcaps."""
    b = lc.b
    return b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)


def _without_log_scale(original):
    return lambda *args: replace(original(*args), log_scale=None)


# mutant -> (module, function, planted bug): the graph built with the function replaced
GRAPH_MUTANTS = {
    "clips-never-bind": (clipped_attention, "_clipped", _unclipped),
    "tap-states-not-carried": (residual_convs, "_tapped", _tap_states_dropped),
    "expert-softcaps-dropped": (moe, "softcapped_swiglu", lambda _f: _plain_swiglu),
    "log-scale-dropped": (decoder, "relative_distances", _without_log_scale),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS)
def test_graph_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    module, name, plant = GRAPH_MUTANTS[mutant]
    broken = build_planted(
        builds.checkpoint(INKLING2),
        tmp_path / mutant,
        monkeypatch,
        lambda m: m.setattr(module, name, plant(getattr(module, name))),
    )
    assert _error(broken, builds.checkpoint(INKLING2)) > 1e-2


def test_unscaled_convolution_sums_fail_hf_parity(builds, tmp_path, monkeypatch):
    """The convolutions' sums not divided by sqrt(K + 1) (sqrt(2K + 1) for the per-token taps)."""
    convs = replace(SPECS["inkling2"].residual_convs, scaled=False)
    broken = build_planted(
        builds.checkpoint(INKLING2), tmp_path / "unscaled", monkeypatch, {"residual_convs": convs}, "inkling2"
    )
    assert _error(broken, builds.checkpoint(INKLING2)) > 1e-2


def _serving_layout(tmp_path):
    """The registry row's model (same config, seed and drawn weights) saved in the hub's serving layout by
    transformers itself (save_pretrained with save_original_format, the conversion mapping reversed: model.llm.*,
    attn_res.attn_queries.{i} for layer i + 1, interleaved w13 experts, a 384-row unembed padded with zeros)."""
    from moe_models import save_moe

    return save_moe(tmp_path / "serving", INKLING2, hub_layout=True)


def test_the_serving_names_read_as_transformers_mapping_reads_them(tmp_path):
    """Every name of the serving layout renamed by ArchSpec.stored_renames as transformers' inkling2_text mapping
    renames it (its renamings in order, then at most one converter), none transposed."""
    from safetensors import safe_open
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightConverter, rename_source_key

    from gqa_export.source.stored_renames import renamed

    mapping = get_checkpoint_conversion_mapping(INKLING2)
    converters = [t for t in mapping if isinstance(t, WeightConverter)]
    renamings = [t for t in mapping if not isinstance(t, WeightConverter)]
    with safe_open(_serving_layout(tmp_path) / "model.safetensors", "np") as stored:
        names = sorted(stored.keys())
    seen = {"model.llm.unembed.weight", "model.llm.attn_res.attn_queries.2", "model.llm.layers.1.q_input_norm.weight"}
    seen |= {"model.llm.layers.3.attn.v_sconv.weight_proj", "model.llm.layers.0.mlp.experts.w13_weight"}
    assert seen <= {*names}
    for name in names:
        theirs, _ = rename_source_key(name, renamings, converters)
        assert renamed(SPECS["inkling2"], name) == (theirs, False), name


def test_the_serving_layout_gives_the_same_package(builds, tmp_path):
    """transformers loads the serving-layout folder to the row's weights, tensor for tensor, and the package built
    from it is the row's byte for byte (the renamed names, the experts' gate and up rows put apart, the head's
    first 380 rows). The weights, not the logits, are compared exactly: the loaded experts are strided views whose
    matmuls may take another kernel (last-bit differences on some CPUs)."""
    import torch

    from gqa_export.pipeline import BuildOptions, build

    checkpoint = _serving_layout(tmp_path)
    ours, theirs = hf_model(builds.checkpoint(INKLING2)).state_dict(), hf_model(checkpoint).state_dict()
    assert ours.keys() == theirs.keys()
    assert not [name for name in ours if not torch.equal(ours[name], theirs[name])]
    build(BuildOptions(str(checkpoint), tmp_path / "pkg", smoke=False, text_only=True))
    for name in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "pkg" / name).read_bytes() == (builds.package(INKLING2) / name).read_bytes(), name
    assert _error(tmp_path / "pkg", checkpoint) < 1e-4


def test_experts_read_interleaved_fail_hf_parity(builds, tmp_path, monkeypatch):
    """The serving layout's w13 experts read as stored (gate and up rows not put apart)."""
    checkpoint = _serving_layout(tmp_path)
    broken = build_planted(checkpoint, tmp_path / "interleaved", monkeypatch, {"row_views": ()}, "inkling2")
    assert _error(broken, checkpoint) > 1e-2


# quant_method -> what its refusal must name (the releases' formats: Inkling-2's MXFP8, Inkling2-Loop's NVFP4)
RELEASE_FORMATS = {
    "mxfp8": (
        "MXFP8 (float8 e4m3 weights, each 32 inputs scaled by a uint8 e8m0",
        "w13_weight_scale / w2_weight_scale",
    ),
    "nvfp4": ("NVFP4 (e2m1 codes two per byte, a float8 e4m3 scale per 16 inputs", "_outer_scale_denominator"),
}


@pytest.mark.parametrize("method", RELEASE_FORMATS)
def test_the_released_formats_are_refused_in_one_line(tmp_path, method):
    """The published checkpoints' formats: refused naming the codes and scales no reader here takes."""
    import json

    checkpoint = _serving_layout(tmp_path)
    config = json.loads((checkpoint / "config.json").read_text())
    config["quantization_config"] = {"quant_method": method}
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(part in errors[0] for part in RELEASE_FORMATS[method]), errors
