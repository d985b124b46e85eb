"""Mutants of what Kimi-Linear's KDA adds to the gated DeltaNet it reuses (gqa_export/graph/kda_gates.py,
docs/hybrid-state.md §8.15): each planted into a copy of the correct registry package (tests/mutants.py)
must break HF parity, the registry's check (tests/arch/test_families.py row kimi_linear), so a graph
that dropped the mechanism fails it.

The decay per key channel (f_b_proj's columns and dt_bias averaged over each head: one decay per head;
-exp(A_log) tiled over the channels instead of repeated per head), the short convolution on q/k/v (its
kernel an identity: only silu left), beta (the delta rule's step taken whole: beta 1), and the
output norm's sigmoid gate (a silu in its place, Qwen3.5's). The latent attention layers' NoPE has no
initializer to plant into: the graph holds no rope table at all, and a rotated key would break parity."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers
from reference import hf_logits, hf_model, ort_prefill_and_decode

HEADS, DIM = 2, 16  # tests/dense_models.py kimi_linear: 2 KDA heads of 16
KDA = "model.layers.[02].self_attn."  # the KDA layers 0 and 2


def _per_head_mean(values: np.ndarray) -> np.ndarray:
    """The last axis's HEADS blocks of DIM channels each replaced by their mean (one value per head)."""
    blocks = values.reshape(*values.shape[:-1], HEADS, DIM)
    return np.broadcast_to(blocks.mean(axis=-1, keepdims=True), blocks.shape).reshape(values.shape)


def _conv_identity(kernel: np.ndarray) -> np.ndarray:
    out = np.zeros_like(kernel)
    out[..., -1] = 1.0  # the current input only: no mixing over time
    return out


MUTANTS = {
    "decay-per-head": ((f"{KDA}f_b_proj.weight", _per_head_mean), (f"{KDA}dt_bias", _per_head_mean)),
    "decay-scale-tiled": ((f"{KDA}decay_scale", lambda w: np.tile(w.reshape(HEADS, DIM)[:, 0], DIM)),),
    "conv-dropped": ((f"{KDA}conv1d.weight", _conv_identity),),
}


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


def test_the_correct_kimi_linear_package_passes(builds):
    assert _parity(builds.package("kimi_linear"), builds.checkpoint("kimi_linear"))


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutant_kda_mechanism_fails_hf_parity(builds, tmp_path, mutant):
    broken = copy_package(builds.package("kimi_linear"), tmp_path / mutant)
    for pattern, change in MUTANTS[mutant]:
        assert len(edit_initializers(broken, pattern, change)) == 2, pattern  # both KDA layers
    assert not _parity(broken, builds.checkpoint("kimi_linear"))


def _edit_graph(package, edit) -> int:
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    edited = edit(model.graph)
    onnx.save(model, str(path))
    return edited


def _beta_one(graph: onnx.GraphProto) -> int:
    """beta * keep -> keep * keep: beta 1 at every real token."""
    nodes = [n for n in graph.node if n.name.endswith("gated_deltanet/beta")]
    for node in nodes:
        node.input[0] = node.input[1]
    return len(nodes)


def _silu_gate(graph: onnx.GraphProto) -> int:
    """normed * sigmoid(z) -> normed * z sigmoid(z)."""
    nodes = [n for n in graph.node if n.name.endswith("gated_deltanet/sigmoid_gate")]
    producers = {o: n for n in graph.node for o in n.output}
    for node in nodes:
        sigmoid = producers[node.input[1]]
        silu = onnx.helper.make_node("Mul", [sigmoid.input[0], sigmoid.output[0]], [f"{node.name}/silu"])
        graph.node.insert(list(graph.node).index(node), silu)
        node.input[1] = silu.output[0]
    return len(nodes)


@pytest.mark.parametrize(("mutant", "edit"), [("beta-dropped", _beta_one), ("gate-silu", _silu_gate)])
def test_mutant_kda_graph_fails_hf_parity(builds, tmp_path, mutant, edit):
    broken = copy_package(builds.package("kimi_linear"), tmp_path / mutant)
    assert _edit_graph(broken, edit) == 2  # both KDA layers
    assert not _parity(broken, builds.checkpoint("kimi_linear"))
