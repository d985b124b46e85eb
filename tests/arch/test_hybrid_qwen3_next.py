"""Qwen3-Next's gated DeltaNet, what only it has (the checks every family gets are its row in
tests/families.py, the state checks shared with the other hybrids are in tests/arch/test_hybrid.py): the
DeltaNet projections fused per key head in the checkpoint and selected row by row into the separate
weights, the genai_config and graph that result, a 1-token prompt, a sparse-step variant, and
mutants of the row selection and the router's normalization (docs/hybrid-state.md §8.5)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import assert_variant_matches_hf, copy_tree
from reference import hf_logits, hf_model, ort_prefill_and_decode, parity_error

from gqa_export.graph.gated_deltanet import grouped_rows
from gqa_export.pipeline import BuildOptions, build

# Qwen3-Next (tests/dense_models.py qwen3_next): Qwen3.5's layers at 0, 2 (DeltaNet) and 1, 3 (gated GQA)
# with Hk 2, Hv 4, dk 16, dv 32; K 4 over 2 x 2 x 16 + 4 x 32 = 192 channels; experts on 0, 1, 3 and a
# dense MLP on 2 (mlp_only_layers); the DeltaNet projections fused per key head in the checkpoint
NEXT = "qwen3_next"


def test_qwen3_next_genai_config_and_graph_carry_both_states_and_the_selected_rows(builds):
    config = json.loads((builds.package(NEXT) / "genai_config.json").read_text())["model"]
    decoder = config["decoder"]
    assert config["type"] == "decoder" and decoder["num_hidden_layers"] == 4  # genai 0.18 has no qwen3_next
    assert decoder["inputs"]["past_recurrent_names"] == "past.%d.recurrent" and "layer_types" not in decoder
    graph = onnx.load(str(builds.package(NEXT) / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert shapes["past.0.conv"] == shapes["past.2.conv"] == ["batch_size", 3, 192]
    assert shapes["past.0.recurrent"] == shapes["past.2.recurrent"] == ["batch_size", 4, 16, 32]
    assert sorted(n for n in shapes if n.startswith("past_key_values")) == [
        "past_key_values.1.key", "past_key_values.1.value", "past_key_values.3.key", "past_key_values.3.value"
    ]  # fmt: skip
    weights = {t.name: list(t.dims) for t in graph.initializer if ".linear_attn.in_proj" in t.name}
    assert {n.removeprefix("model.layers.0.linear_attn.") for n in weights if ".layers.0." in n} == {
        "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"
    }  # fmt: skip
    assert weights["model.layers.0.linear_attn.in_proj_qkv.weight"] == [64, 192]
    assert weights["model.layers.0.linear_attn.in_proj_z.weight"] == [64, 128]
    ops = [n.op_type for n in graph.node]
    assert ops.count("LinearAttention") == ops.count("CausalConvWithState") == 2 and ops.count("MoE") == 3


def test_qwen3_next_one_token_prompt_and_decode_steps_match_hf(builds):
    """A prompt shorter than the conv kernel: the state starts from zeros, then 6 decode steps."""
    checkpoint = builds.checkpoint(NEXT)
    tokens, got = ort_prefill_and_decode(builds.package(NEXT), [0], steps=6)
    ref = hf_logits(hf_model(checkpoint), tokens, 1)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert np.abs(ref).max() > 1.0


def _contiguous_rows(d, part):
    """The fused weights read as if they held all of q, then k, v, z (and b, then a): the row
    selection undone."""
    sizes = {"q": d.key_heads * d.key_dim, "k": d.key_heads * d.key_dim}
    sizes.update(v=d.value_heads * d.value_dim, z=d.value_heads * d.value_dim, b=d.value_heads, a=d.value_heads)
    order = "ba" if part in ("b", "a") else "qkvz"
    starts = dict(zip(order, np.cumsum([0] + [sizes[p] for p in order]).tolist(), strict=False))
    return [(starts[p], starts[p] + sizes[p]) for p in part]


def _b_a_swapped(d, part):
    return grouped_rows(d, {"b": "a", "a": "b"}.get(part, part))


@pytest.mark.parametrize("rows", [_contiguous_rows, _b_a_swapped], ids=["reordering_undone", "b_a_swapped"])
def test_qwen3_next_mutant_row_selection_fails_parity(builds, tmp_path, monkeypatch, rows):
    """The DeltaNet's q | k | v, z, b and a rows taken from the fused per-key-head projections
    without their grouping, or with beta's and the decay's rows exchanged."""
    from gqa_export.graph import gated_deltanet

    monkeypatch.setattr(gated_deltanet, "grouped_rows", rows)
    package = tmp_path / "pkg"
    build(BuildOptions(str(builds.checkpoint(NEXT)), package, smoke=False))
    assert parity_error(package, builds.checkpoint(NEXT)) > 1e-2  # measured 4.4 and 4.7


def test_qwen3_next_mutant_renormalized_top_k_fails_parity(builds, tmp_path):
    """The tiny config says norm_topk_prob false: a package exported as if it were true (the top-k
    weights renormalized, as Qwen3.5-MoE always does) departs from HF on the same weights."""
    checkpoint = copy_tree(builds.checkpoint(NEXT), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["norm_topk_prob"] is False
    (checkpoint / "config.json").write_text(json.dumps({**config, "norm_topk_prob": True}))
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))
    assert parity_error(package, builds.checkpoint(NEXT)) > 1e-2  # measured 1.7


def test_qwen3_next_sparse_step_variant_matches_hf(tmp_path):
    """Experts every second layer (decoder_sparse_step 2: dense MLPs on 0 and 2), four value heads
    per key head (r = 4, dv = dk), top-k renormalized (norm_topk_prob true, the hub's setting)."""
    from dense_models import save_dense

    overrides = dict(decoder_sparse_step=2, mlp_only_layers=[], norm_topk_prob=True)
    checkpoint = save_dense(tmp_path / "ckpt", NEXT, linear_num_value_heads=8, linear_value_head_dim=16, **overrides)
    package = tmp_path / "pkg"
    build(BuildOptions(str(checkpoint), package, smoke=False))  # genai runs it below
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    assert [n.op_type for n in graph.node].count("MoE") == 2
    assert_variant_matches_hf(package, checkpoint)
