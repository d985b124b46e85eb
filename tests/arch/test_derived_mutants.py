"""Mutants of the mechanisms the issue #39 families brought (gqa_export/arch/derived_families.py):
each planted into a copy of the correct registry package (tests/mutants.py) must break HF parity,
the registry's check (tests/arch/test_families.py), so a graph that dropped the mechanism fails it.

NanoChat: the RoPE rotating by minus the angle (its sin table negated: un-negated, the rotation
goes the usual way), the weightless RMSNorm of the embeddings (a weight of 2 on it), the scaleless
q/k norms after RoPE (a weight of 2: scores x4), and the final logit softcap (its cap doubled).
GPT-Neo: its local layers' window (read from attention_layers' "local"; dropped) and its unscaled
scores (GroupQueryAttention's scale set to 1/sqrt(head_dim)). XGLM: its sinusoidal position table
computed at export (rows shifted by one: the offset wrong; the sin and cos halves swapped).
BitNet (float checkpoint): either sub-norm left out (before o_proj, before down_proj), and its
squared ReLU as a plain ReLU; the packed ternary checkpoint's mutants are in
tests/source/test_prequant_bitnet.py. Apertus-1.5: its pruned lm_head's width stated as the vocabulary's in
genai_config (genai fails at its first step), and the pruned heads its class cannot hold (refused).
Cohere-Compass (spec mutants): its rotate-half pairs read as Cohere2's GPT-J pairs, and RoPE on the full
layers whose rope_parameters entry is null. GraniteSWA: the layer with its own RoPE base rotated by the global
table, the sinks zeroed. HyperCLOVAX: its peri-layer norms left out, its logits divided by logits_scaling
(Granite's way) instead of multiplied. LFM3: its per-head output gates constant (weights zeroed), its sandwich norms
left out. DiffLlama: lambda zeroed (no difference), the weightless norm over each head pair left out; its
standard-Attention modes refused. Doge: the keys' dynamic bias left out of the values, the residual vectors
as ones; its MoE refused before anything is read."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from onnx import numpy_helper
from reference import hf_logits, hf_model, ort_prefill_and_decode

MUTANTS = {
    "rope-not-reversed": ("sin_cache", times(-1.0)),
    "embedding-norm-weighted": ("const.embedding_norm_ones", times(2.0)),
    "qk-norms-weighted": ("const.[qk]_norm_unit_weight*", times(2.0)),
    "softcap-doubled": ("const.final_softcap", times(2.0)),
}


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


def test_the_correct_nanochat_package_passes(builds):
    assert _parity(builds.package("nanochat"), builds.checkpoint("nanochat"))


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_nanochat_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    pattern, change = MUTANTS[mutant]
    broken = copy_package(builds.package("nanochat"), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert not _parity(broken, builds.checkpoint("nanochat"))


def _set_gqa_attribute(package, name: str, value: float | int) -> None:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        for attr in node.attribute if node.op_type == "GroupQueryAttention" else ():
            if attr.name == name:
                setattr(attr, "f" if attr.type == onnx.AttributeProto.FLOAT else "i", value)
    onnx.save(model, str(path))


def test_the_correct_gpt_neo_package_passes(builds):
    assert _parity(builds.package("gpt_neo"), builds.checkpoint("gpt_neo"))


@pytest.mark.parametrize(
    ("mutant", "attribute", "value"), [("window-dropped", "local_window_size", -1), ("scores-scaled", "scale", 0.25)]
)
def test_mutant_gpt_neo_attention_fails_hf_parity(builds, tmp_path, mutant, attribute, value):
    broken = copy_package(builds.package("gpt_neo"), tmp_path / mutant)
    _set_gqa_attribute(broken, attribute, value)
    assert not _parity(broken, builds.checkpoint("gpt_neo"))


XGLM_MUTANTS = {
    "positions-shifted": lambda table: np.roll(table, 1, axis=0),
    "sin-cos-swapped": lambda table: np.roll(table, table.shape[1] // 2, axis=1),
}


def test_the_correct_xglm_package_passes(builds):
    assert _parity(builds.package("xglm"), builds.checkpoint("xglm"))


@pytest.mark.parametrize("mutant", XGLM_MUTANTS)
def test_mutant_xglm_positions_fail_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("xglm"), tmp_path / mutant)
    assert edit_initializers(broken, "model.embed_positions.weights", XGLM_MUTANTS[mutant])
    assert not _parity(broken, builds.checkpoint("xglm"))


def _bypass(model: onnx.ModelProto, node_suffix: str) -> int:
    """The nodes named ...node_suffix left out: their consumers read their first input instead."""
    nodes = [n for n in model.graph.node if n.name.endswith(node_suffix)]
    for node in nodes:
        for other in model.graph.node:
            other.input[:] = [node.input[0] if i == node.output[0] else i for i in other.input]
    return len(nodes)


BITNET_MUTANTS = {
    "attention-sub-norm-dropped": "attn/sub_norm",
    "mlp-sub-norm-dropped": "mlp/sub_norm",
    "relu2-as-relu": "mlp/relu2",  # the Mul squaring the Relu left out
}


def test_the_correct_bitnet_package_passes(builds):
    assert _parity(builds.package("bitnet"), builds.checkpoint("bitnet"))


@pytest.mark.parametrize("mutant", BITNET_MUTANTS)
def test_mutant_bitnet_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("bitnet"), tmp_path / mutant)
    model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
    assert _bypass(model, BITNET_MUTANTS[mutant]) == 3, "one node per layer"
    onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("bitnet"))


def test_apertus1p5_pruned_head_read_as_the_vocabulary_fails(builds, tmp_path):
    """Apertus-1.5's lm_head pruned to output_vocab_size ids: the package's logits are that wide and so is
    genai_config's vocab_size; a package stating the embedding's width (the vocabulary) instead fails at
    genai's first step, whose logits buffer is vocab_size wide."""
    import json

    from gqa_export.runtime.run import generate_greedy

    package = builds.package("apertus1p5_text")
    assert json.loads((package / "genai_config.json").read_text())["model"]["vocab_size"] == 320
    broken = copy_package(package, tmp_path / "vocab")
    config = json.loads((broken / "genai_config.json").read_text())
    config["model"]["vocab_size"] = 384
    (broken / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(Exception, match="logits"):
        generate_greedy(broken, [0, 17, 45], 4)


@pytest.mark.parametrize(
    ("rows", "tied", "says"),
    [(400, False, "must be between 1 and vocab_size 384"), (320, True, "tied to the embeddings is not supported")],
)
def test_a_pruned_head_the_class_cannot_hold_is_refused(rows, tied, says):
    from gqa_export.errors import InputError
    from gqa_export.model.config_reads import pruned_head_rows

    with pytest.raises(InputError, match=says):
        pruned_head_rows(lambda name: rows if name == "output_vocab_size" else None, 384, tied)
    assert pruned_head_rows(lambda name: 384, 384, False) == 0  # a full-width head is no pruned one


# Cohere-Compass: the mechanism dropped as a spec change (the checkpoint as it is): Cohere2's GPT-J pairs
# instead of rotate-half, RoPE on the full layers whose rope_parameters entry is null
COMPASS_SPEC_MUTANTS = {"rope-pairs-interleaved": dict(rope_interleaved=True), "null-rope-type-rotated": {}}


@pytest.mark.parametrize("mutant", COMPASS_SPEC_MUTANTS)
def test_cohere_compass_spec_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    from dataclasses import replace

    from gqa_export import arch
    from gqa_export.pipeline import BuildOptions, build

    checkpoint = builds.checkpoint("cohere_compass_text")
    assert _parity(builds.package("cohere_compass_text"), checkpoint)
    spec = arch.SPECS["cohere_compass_text"]
    change = COMPASS_SPEC_MUTANTS[mutant] or dict(rope_layers="all")
    monkeypatch.setitem(arch.SPECS, spec.name, replace(spec, **change))
    build(BuildOptions(str(checkpoint), tmp_path / mutant, smoke=False, text_only=True))
    assert not _parity(tmp_path / mutant, checkpoint)


def _initializer(package, name: str) -> np.ndarray:
    model = onnx.load(str(package / "model.onnx"))
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def test_the_correct_granite_swa_package_passes(builds):
    assert _parity(builds.package("granite_swa"), builds.checkpoint("granite_swa"))


@pytest.mark.parametrize("mutant", ["layer-theta-as-global", "sinks-zeroed"])
def test_mutant_granite_swa_attention_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("granite_swa"), tmp_path / mutant)
    if mutant == "sinks-zeroed":
        assert edit_initializers(broken, "model.layers.*.self_attn.sinks", times(0.0))
    else:  # layer 2's base (500000) rotated with the global table (10000)
        for table in ("cos", "sin"):
            values = _initializer(broken, f"{table}_cache")
            assert edit_initializers(broken, f"rope_theta_500000.0.{table}_cache", lambda _, v=values: v)
    assert not _parity(broken, builds.checkpoint("granite_swa"))


def test_the_correct_hyperclovax_package_passes(builds):
    assert _parity(builds.package("hyperclovax"), builds.checkpoint("hyperclovax"))


@pytest.mark.parametrize("mutant", ["post-norms-dropped", "logits-divided"])
def test_mutant_hyperclovax_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("hyperclovax"), tmp_path / mutant)
    if mutant == "logits-divided":
        assert edit_initializers(broken, "const.logit_scale", lambda scale: 1.0 / scale)
    else:
        model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
        assert _bypass(model, "/post_attention_layernorm") + _bypass(model, "/post_feedforward_layernorm") == 6
        onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("hyperclovax"))


@pytest.mark.parametrize("mutant", ["head-gates-constant", "post-norms-dropped"])
def test_mutant_lfm3_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("lfm3"), tmp_path / mutant)
    if mutant == "head-gates-constant":  # every head's gate sigmoid(0) = 0.5
        assert len(edit_initializers(broken, "model.layers.*.self_attn.gate_proj.weight", times(0.0))) == 2
    else:
        model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
        assert _bypass(model, "/post_attention_layernorm") + _bypass(model, "/post_feedforward_layernorm") == 8
        onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("lfm3"))


def test_the_correct_diffllama_package_passes(builds):
    assert _parity(builds.package("diffllama"), builds.checkpoint("diffllama"))


@pytest.mark.parametrize("mutant", ["lambda-zeroed", "pair-norm-dropped"])
def test_mutant_diffllama_attention_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("diffllama"), tmp_path / mutant)
    if mutant == "lambda-zeroed":
        assert len(edit_initializers(broken, "const.diff_lambda*", times(0.0))) == 3
    else:
        model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
        assert _bypass(model, "/diff_norm") == 3
        onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("diffllama"))


def test_diffllama_standard_attention_is_refused(builds, tmp_path):
    from gqa_export.errors import InputError
    from gqa_export.pipeline import BuildOptions, build

    with pytest.raises(InputError, match="differential attention is built in the GQA graph only"):
        build(BuildOptions(str(builds.checkpoint("diffllama")), tmp_path / "out", attention="bias", smoke=False))
    assert not (tmp_path / "out").exists()


def test_the_correct_doge_package_passes(builds):
    assert _parity(builds.package("doge"), builds.checkpoint("doge"))
    assert json.loads((builds.package("doge") / "genai_config.json").read_text())["model"]["context_length"] == 96


@pytest.mark.parametrize("mutant", ["key-bias-dropped", "residual-vectors-ones"])
def test_mutant_doge_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("doge"), tmp_path / mutant)
    if mutant == "residual-vectors-ones":
        assert len(edit_initializers(broken, "model.layers.*_residual", np.ones_like)) == 6
    else:
        model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
        assert _bypass(model, "/v_key_factor") == 3
        onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("doge"))


def test_doge_moe_is_refused_before_anything_is_written(tmp_path):
    from dense_models import save_dense

    from gqa_export.errors import InputError
    from gqa_export.pipeline import BuildOptions, build

    checkpoint = save_dense(tmp_path / "doge_moe", "doge", is_moe=True, num_experts=16, num_experts_per_tok=2)
    with pytest.raises(InputError, match=r"Doge's cross-domain MoE \(is_moe\) reshapes its router logits"):
        build(BuildOptions(str(checkpoint), tmp_path / "out", smoke=False))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family", ["diffllama", "doge"])
def test_widened_heads_with_a_rotary_width_gqa_cannot_fuse_match_hf(tmp_path, family):
    """Projection heads of 8 (DiffLlama's cache heads 16, Doge's 24): RoPE over 8 channels is not GQA's fused
    RoPE (widths multiples of 16), so it is applied by plain ops before the heads are widened (was skipped: the
    package ran without RoPE, logits off by 3.3)."""
    from dense_models import save_dense

    from gqa_export.pipeline import BuildOptions, build

    checkpoint = save_dense(tmp_path / "ckpt", family, head_dim=8, num_attention_heads=4, num_hidden_layers=1)
    build(BuildOptions(str(checkpoint), tmp_path / "out", smoke=False))
    assert _parity(tmp_path / "out", checkpoint)
