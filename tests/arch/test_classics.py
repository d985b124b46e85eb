"""The classic decoders (GPT-2, GPT-NeoX / Pythia, OPT, GPT-J), what only they have: learned
absolute position tables counted from attention_mask, Conv1D weights stored [in, out], a fused qkv
stored head by head, the parallel residual with one or two norms, partial interleaved RoPE, and
the layouts refused in one line. The checks every family gets (prompt and decode logits, greedy
tokens, every attention mode, a right-padded batch through ORT and onnxruntime-genai, int4) are
their rows in tests/families.py; here: the graph they make, config variants, refusals, and mutants
of each mechanism."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from mutants import edit_initializers, edited_checkpoint, transpose_blocks
from reference import (
    parity_error,
)
from typer.testing import CliRunner

from gqa_export import arch
from gqa_export.arch.spec import AbsolutePositions
from gqa_export.cli import app
from gqa_export.errors import InputError
from gqa_export.pipeline import BuildOptions, build

CLASSICS = ("gpt2", "gpt_neox", "opt", "gptj")


def _built(checkpoint: Path, out: Path, **options) -> Path:
    build(BuildOptions(str(checkpoint), out, smoke=False, **options))
    return out


# initializers as each graph holds them: the position tables as stored (OPT's 2 extra rows), GPT-2's
# Conv1D c_attn [in, 3 out] as stored, GPT-NeoX's per-head qkv (and bias) selected into one [in, 3 out]
STORED = {
    "gpt2": {"transformer.wpe.weight": [256, 64], "transformer.h.0.attn.c_attn.weight": [64, 192]},
    "gpt_neox": {
        f"gpt_neox.layers.0.attention.query_key_value.{p}": s for p, s in (("weight", [128, 384]), ("bias", [384]))
    },
    "opt": {"model.decoder.embed_positions.weight": [258, 64], "model.decoder.layers.0.fc1.weight": [64, 96]},
    "gptj": {"transformer.h.0.attn.qkv_proj.weight": [128, 384], "lm_head.bias": [384]},
}


@pytest.mark.parametrize("family", CLASSICS)
def test_classic_graph_holds_the_position_tables_and_the_weights_as_stored(builds, family):
    """No position_ids input (positions come from attention_mask), the weights of STORED, and genai
    type decoder (0.18's gpt2 type refuses these graphs, docs/classic-decoders.md)."""
    package = builds.package(family)
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert [i.name for i in graph.input][:2] == ["input_ids", "attention_mask"]
    assert not any(i.name == "position_ids" for i in graph.input)
    assert json.loads((package / "genai_config.json").read_text())["model"]["type"] == "decoder"
    stored = {t.name: list(t.dims) for t in graph.initializer}
    assert {name: stored.get(name) for name in STORED[family]} == STORED[family]


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        pytest.param("gpt2", dict(n_inner=None, activation_function="relu"), id="gpt2_width_4h_relu"),
        pytest.param("gpt_neox", dict(use_parallel_residual=False, attention_bias=False), id="neox_sequential_nobias"),
        pytest.param("opt", dict(enable_bias=False, activation_function="gelu"), id="opt_nobias_gelu"),
        pytest.param("gptj", dict(rotary_dim=32), id="gptj_full_rotary"),  # RoPE on the whole head
        # GPT-2's score switches (were refused): layer i's scores / (i + 1), the eager float32 upcast (same numbers
        # in fp32); unscaled scores
        pytest.param(
            "gpt2", dict(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True), id="gpt2_inverse_layer"
        ),
        pytest.param("gpt2", dict(scale_attn_weights=False, n_layer=2), id="gpt2_unscaled"),
        # SantaCoder's (bigcode/gpt_bigcode-santacoder) gelu_fast: the tanh GELU under another name (was refused)
        pytest.param("gpt_bigcode", dict(activation_function="gelu_fast", n_layer=2), id="santacoder_gelu_fast"),
        # MPT's MLP is 4 x hidden whatever expansion_ratio says (transformers' MptMLP; was refused as a config that
        # does not belong to its weights)
        pytest.param("mpt", dict(expansion_ratio=2, n_layers=1), id="mpt_expansion_ratio_unread"),
        # BioGPT's and XGLM's scale_embedding false: unscaled token embeddings (were refused)
        pytest.param("biogpt", dict(scale_embedding=False, num_hidden_layers=1), id="biogpt_unscaled_embedding"),
        pytest.param("xglm", dict(scale_embedding=False, num_layers=1), id="xglm_unscaled_embedding"),
        # GPT-J's and CodeGen's rotary base is 10000 whatever a stray rope_theta says (the export read it: GPT-J
        # 2.0 off HF at rope_theta 50; test_a_stray_rope_theta_mutant)
        pytest.param("gptj", dict(rope_theta=50.0, n_layer=2), id="gptj_rope_theta_unread"),
        pytest.param("codegen", dict(rope_theta=50.0, n_layer=2), id="codegen_rope_theta_unread"),
    ],
)
def test_classic_config_variants_match_hf(tmp_path, family, overrides):
    from dense_models import save_dense

    checkpoint = save_dense(tmp_path / "ckpt", family, **overrides)
    package = _built(checkpoint, tmp_path / "pkg")
    assert parity_error(package, checkpoint) < 1e-4
    assert parity_error(package, checkpoint, (0,)) < 1e-4


def test_a_stray_rope_theta_mutant(tmp_path, monkeypatch):
    """GPT-J's spec without its fixed rotary base reads the stray rope_theta again: far off HF."""
    import dataclasses

    from dense_models import save_dense

    from gqa_export import arch

    monkeypatch.setitem(arch.SPECS, "gptj", dataclasses.replace(arch.SPECS["gptj"], fixed_rope_theta=None))
    checkpoint = save_dense(tmp_path / "ckpt", "gptj", rope_theta=50.0, n_layer=2)
    assert parity_error(_built(checkpoint, tmp_path / "pkg"), checkpoint) > 0.1


@pytest.mark.parametrize(
    ("family", "config", "message"),
    [
        ("gpt2", dict(add_cross_attention=True), "add_cross_attention"),
        ("opt", dict(do_layer_norm_before=False), "post-norm layers"),
        ("opt", dict(word_embed_proj_dim=32), "project_in/project_out"),
        ("opt", dict(_remove_final_layer_norm=True), "final LayerNorm"),
    ],
)
def test_unsupported_classic_layouts_are_refused_in_one_line(builds, tmp_path, family, config, message):
    checkpoint = edited_checkpoint(builds.checkpoint(family), tmp_path / "ckpt", **config)
    with pytest.raises(InputError, match=message) as raised:
        _built(checkpoint, tmp_path / "pkg")
    assert "\n" not in str(raised.value)


def test_refusal_exits_2_from_the_cli(builds, tmp_path):
    checkpoint = edited_checkpoint(builds.checkpoint("gpt2"), tmp_path / "ckpt", add_cross_attention=True)
    result = CliRunner().invoke(app, ["build", str(checkpoint), "-o", str(tmp_path / "pkg"), "--no-smoke"])
    assert result.exit_code == 2 and "add_cross_attention" in result.output, result.output


def _with_spec(monkeypatch, name: str, **changes) -> None:
    monkeypatch.setitem(arch.SPECS, name, replace(arch.SPECS[name], **changes))


@pytest.mark.parametrize(
    ("family", "changes"),
    [  # measured (docs/classic-decoders.md): 13.8, 5.2, 2.1, 10.5, 11.6, 2.0
        pytest.param("gpt2", dict(positions=None), id="gpt2_no_positions"),
        pytest.param("gpt_neox", dict(qkv_layout="stacked"), id="neox_rows_stacked"),  # per-head qkv read as [q|k|v]
        pytest.param(
            "gpt_neox", dict(layer=replace(arch.SPECS["gpt_neox"].layer, post_attention_norm=None)), id="neox_one_norm"
        ),
        pytest.param("opt", dict(positions=AbsolutePositions("embed_positions.weight")), id="opt_offset_0"),
        pytest.param("opt", dict(positions=AbsolutePositions("embed_positions.weight", 3)), id="opt_offset_3"),
        pytest.param("gptj", dict(rope_interleaved=False), id="gptj_halves"),  # GPT-J's pairs rotated as halves
    ],
)
def test_mutant_classic_mechanism_fails_parity(builds, tmp_path, monkeypatch, family, changes):
    _with_spec(monkeypatch, family, **changes)
    package = _built(builds.checkpoint(family), tmp_path / "pkg")
    assert parity_error(package, builds.checkpoint(family)) > 1e-2


@pytest.mark.parametrize(
    ("family", "config", "bound"),
    [  # measured: 3.3, 7.1e-4, 1.0
        pytest.param("gpt_neox", dict(use_parallel_residual=False), 1e-2, id="neox_sequential"),
        pytest.param("gpt_neox", dict(hidden_act="gelu_new"), 1e-4, id="neox_tanh_gelu"),  # exact GELU as tanh
        pytest.param("gptj", dict(rotary_dim=24), 1e-2, id="gptj_rotary_x1.5"),
        # GPT-2's score switches read where the checkpoint has them off
        pytest.param("gpt2", dict(scale_attn_by_inverse_layer_idx=True), 1e-2, id="gpt2_inverse_layer"),
        pytest.param("gpt2", dict(scale_attn_weights=False), 1e-2, id="gpt2_unscaled"),
    ],
)
def test_mutant_classic_config_fails_parity(builds, tmp_path, family, config, bound):
    """A package built from a config that says otherwise than the checkpoint was made with: off by
    more than the families' 1e-4 (`bound`: what each mutant measurably exceeds)."""
    checkpoint = edited_checkpoint(builds.checkpoint(family), tmp_path / "ckpt", **config)
    package = _built(checkpoint, tmp_path / "pkg")
    assert parity_error(package, builds.checkpoint(family)) > bound


def test_mutant_conv1d_read_transposed_fails_parity(builds, tmp_path):
    """GPT-2's square Conv1D c_proj [in, out] read as a Linear's [out, in]."""
    package = tmp_path / "pkg"
    shutil.copytree(builds.package("gpt2"), package)
    assert edit_initializers(package, "transformer.h.*.attn.c_proj.weight", transpose_blocks)
    assert parity_error(package, builds.checkpoint("gpt2")) > 1e-2
