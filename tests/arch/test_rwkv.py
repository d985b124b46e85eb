"""RWKV-4's own checks (tests/state_space_models.py rwkv; the checks every family gets are its row in
tests/families.py): the states in the graph and genai_config, the refusals, a config variant against
HF, and mutants of its mechanisms (the time_first bonus, the token shift, the decay's sign, the
stream's rescaling) that fail parity (docs/hybrid-state.md §8.18)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree, refused_build_errors
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app
from gqa_export.pipeline import BuildOptions, build

runner = CliRunner()
RWKV = "rwkv"  # 3 blocks of 64 channels, rescale_every 2


def test_rwkv_package_carries_state_only(builds):
    """Per layer one [B, 2, H] token-shift state and one float32 [B, 3, C] WKV state, bound by the
    RecurrentState under one index; no KV cache; one Scan per layer (docs/hybrid-state.md §8.18)."""
    package = builds.package(RWKV)
    config = json.loads((package / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert config["model"]["type"] == "decoder" and "layer_types" not in decoder
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
    assert config["search"]["past_present_share_buffer"] is True
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    inputs = {i.name: i.type.tensor_type for i in graph.input}
    assert not [n for n in inputs if n.startswith("past_key_values")]
    shapes = {n: [d.dim_value or d.dim_param for d in t.shape.dim] for n, t in inputs.items()}
    assert [shapes[f"past.{i}.conv"] for i in range(3)] == [["batch_size", 2, 64]] * 3
    assert [shapes[f"past.{i}.recurrent"] for i in range(3)] == [["batch_size", 3, 64]] * 3
    assert {inputs[f"past.{i}.recurrent"].elem_type for i in range(3)} == {onnx.TensorProto.FLOAT}
    assert [n.op_type for n in graph.node].count("Scan") == 3
    report = json.loads(runner.invoke(app, ["inspect", str(package), "--json"]).stdout)
    assert report["summary"]["kv_cache_bytes_per_row"] == 0 and report["findings"] == []


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        ({"attention_hidden_size": 32}, "rwkv with attention_hidden_size 32 != hidden_size 64 is not exported"),
        ({"layer_norm_epsilon": 1e-6}, "rwkv's ln_out normalizes at eps 1e-05 whatever layer_norm_epsilon says"),
    ],
    ids=["time_mix_width", "norm_eps"],
)
def test_rwkv_config_it_cannot_export_is_refused_in_one_line(builds, tmp_path, edit, line):
    """A time mix narrower than the stream (HF's own cached forward fails on it) and an eps ln_out
    would not use: one line, exit 2, nothing written."""
    errors = refused_build_errors(builds.checkpoint(RWKV), tmp_path, edit)
    assert len(errors) == 1 and errors[0].startswith(f"error: {line}"), errors


RWKV_MUTANTS = {
    # the current token without its time_first bonus (u = 0)
    "time_first_dropped": ("*attention.time_first", lambda u: u * 0),
    # no token shift: every mix takes the current token only
    "no_token_shift": ("*time_mix_*", lambda m: np.ones_like(m)),
    # the decay's sign flipped: w = +exp(time_decay), a state that grows instead of fading
    "decay_sign_flipped": ("*attention.time_decay.neg_exp", lambda w: -w),
}


@pytest.mark.parametrize(("pattern", "change"), RWKV_MUTANTS.values(), ids=RWKV_MUTANTS.keys())
def test_rwkv_mutant_initializers_fail_parity(builds, tmp_path, pattern, change):
    from mutants import edit_initializers

    package = copy_tree(builds.package(RWKV), tmp_path / "pkg")
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(RWKV)) > 1e-2


def test_rwkv_mutant_stream_not_halved_fails_parity(builds, tmp_path):
    """The stream not halved after block 1 while block 2's output projections still are (HF's
    eval-mode rescaling half applied)."""
    package = copy_tree(builds.package(RWKV), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    halving = [n for n in model.graph.node if n.name.endswith("/rescale")]
    assert len(halving) == 1
    for other in model.graph.node:
        other.input[:] = [halving[0].input[0] if i == halving[0].output[0] else i for i in other.input]
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(RWKV)) > 1e-2


def test_rwkv_variant_tied_without_rescaling_matches_hf(tmp_path):
    """Tied embeddings and rescale_every 0 (no rescaling): logits and greedy tokens as HF's."""
    from state_space_models import save_state_space

    checkpoint = save_state_space(tmp_path / "ckpt", RWKV, tie_word_embeddings=True, rescale_every=0)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert_variant_matches_hf(package, checkpoint)


def test_rwkv_fresh_state_starts_at_hfs_running_max(tmp_path):
    """onnxruntime-genai starts the WKV state at zeros, HF its running max at -1e30. With block 0's
    keys 60 times larger (down to about -100) a zero max underflows exp(k - max) and the first
    token's output is 0 / 0; the graph starts a state that has seen nothing (den 0) at HF's max and
    stays exact, and the mutant without that start does not (docs/hybrid-state.md §8.18)."""
    import torch
    from state_space_models import build_state_space
    from tiny_models import save_tokenizer

    model = build_state_space(RWKV)
    with torch.no_grad():
        model.rwkv.blocks[0].attention.key.weight.mul_(60)
    checkpoint = tmp_path / "ckpt"
    model.save_pretrained(checkpoint)
    save_tokenizer(checkpoint, vocab_size=384)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert parity_error(package, checkpoint) < 1e-4
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False)
    starts = [n for n in graph.graph.node if n.name.endswith("/initial_max")]
    assert len(starts) == 3
    for start in starts:  # the past max as it comes: zeros from the runtime
        for other in graph.graph.node:
            other.input[:] = [start.input[2] if i == start.output[0] else i for i in other.input]
    onnx.save(graph, str(package / "model.onnx"))
    assert not parity_error(package, checkpoint) < 1e-2  # NaN: 0 / 0 at the first token


def _ignore_keep_in_steps(model: onnx.ModelProto, suffixes: tuple[str, ...]) -> int:
    """Every Scan body's state outputs Where(keep, new, old) replaced by `new`: padding advances the state."""
    count = 0
    for node in (n for n in model.graph.node if n.op_type == "Scan"):
        body = next(a.g for a in node.attribute if a.name == "body")
        wheres = {n.output[0]: n.input[1] for n in body.node if n.op_type == "Where" and n.name.endswith(suffixes)}
        for output in body.output:
            if output.name in wheres:
                output.name, count = wheres[output.name], count + 1
    return count


@pytest.mark.parametrize(
    ("family", "suffixes"),
    [("rwkv", ("/num_out", "/den_out", "/max_out")), ("xlstm", ("/c_out", "/n_out", "/m_out"))],
    ids=["rwkv", "xlstm"],
)
def test_padding_mutant_fails_the_ragged_batch(builds, tmp_path, family, suffixes):
    """The recurrence run over a right-padded row's trailing padding (the keep mask ignored inside the
    Scan): that row's decode steps leave HF's on its unpadded prompt (docs/hybrid-state.md §1.5)."""
    from reference import hf_model, ragged_logits_error

    package = copy_tree(builds.package(family), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    assert _ignore_keep_in_steps(model, suffixes) == 3 * len([n for n in model.graph.node if n.op_type == "Scan"])
    onnx.save(model, str(package / "model.onnx"))
    assert ragged_logits_error(package, hf_model(builds.checkpoint(family))) > 1e-2
