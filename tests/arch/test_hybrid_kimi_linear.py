"""Mutants of what Kimi-Linear's KDA adds to the gated DeltaNet it reuses (gqa_export/graph/kda_gates.py,
docs/hybrid-state.md §8.17): each planted into a copy of the correct registry package (tests/mutants.py)
must break HF parity, the registry's check (tests/arch/test_families.py row kimi_linear), so a graph
that dropped the mechanism fails it.

The decay per key channel (f_b_proj's columns and dt_bias averaged over each head: one decay per head;
-exp(A_log) tiled over the channels instead of repeated per head), the short convolution on q/k/v (its
kernel an identity: only silu left), beta (the delta rule's step taken whole: beta 1), and the
output norm's sigmoid gate (a silu in its place, Qwen3.5's). The latent attention layers' NoPE has no
initializer to plant into (the graph holds no rope table): a spec with RoPE on them is the mutant."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import onnx
import pytest
from families import PROMPT
from kimi_models import save_kimi_linear
from mutants import copy_package, edit_initializers
from reference import hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build

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


def _export(checkpoint, out):
    build(BuildOptions(str(checkpoint), out, smoke=False, text_only=True))
    return out


def test_the_saved_layout_exports_the_hub_layouts_package(builds, tmp_path):
    """transformers' save_pretrained layout (the dense MLP under block_sparse_moe) exports the hub
    layout's graph and weights byte for byte (the same weights: tests/kimi_models.py), so the registry
    row's checks hold for it too."""
    out = _export(save_kimi_linear(tmp_path / "ckpt", "saved"), tmp_path / "pkg")
    hub = builds.package("kimi_linear")
    for name in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (out / name).read_bytes() == (hub / name).read_bytes(), name


def test_query_lora_and_attention_biases_match_hf(tmp_path):
    """The latent attention's other form (q_a_proj / q_a_layernorm / q_b_proj with a q_lora_rank) with
    attention_bias (q_a_proj, kv_a_proj_with_mqa and o_proj biases), on MLA's layers only."""
    checkpoint = save_kimi_linear(tmp_path / "ckpt", q_lora_rank=16, attention_bias=True)
    assert _parity(_export(checkpoint, tmp_path / "pkg"), checkpoint)


def test_the_v5_layout_matches_hf(tmp_path):
    """transformers 5.x's own names (self_attn.forget_gate.*, one conv1d kernel, fused experts and the
    dense MLP under mlp): the experts' initializers are named after the fused tensors, the rest as the
    hub's; HF parity on the prompt and two decode steps."""
    checkpoint = save_kimi_linear(tmp_path / "ckpt", "v5")
    assert _parity(_export(checkpoint, tmp_path / "pkg"), checkpoint)


# config.json as moonshotai's releases spell it: the layer pattern and the KDA shapes in linear_attn_config
# (1-indexed layers), the dense layers by first_k_dense_replace, and the remote code's switches transformers'
# class does not read (it always runs NoPE latent attention and the grouped sigmoid router)
HUB_CONFIG = dict(
    linear_attn_config={
        "full_attn_layers": [2], "kda_layers": [1, 3], "num_heads": 2, "head_dim": 16, "short_conv_kernel_size": 4,
    },
    first_k_dense_replace=1, mla_use_nope=True, rope_theta=10000.0, moe_layer_freq=1,
    use_grouped_topk=True, moe_router_activation_func="sigmoid", num_nextn_predict_layers=0,
)  # fmt: skip
SAVED_ONLY = ("layer_types", "mlp_layer_types", "linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim")


def test_the_hub_config_spelling_exports_the_same_package(builds, tmp_path):
    """The registry checkpoint under a config.json spelled as the hub's (HUB_CONFIG) exports its package
    byte for byte: transformers' config class reads the same layers and shapes from it."""
    checkpoint = shutil.copytree(builds.checkpoint("kimi_linear"), tmp_path / "ckpt")
    config = json.loads((checkpoint / "config.json").read_text())
    config = {k: v for k, v in config.items() if k not in SAVED_ONLY} | HUB_CONFIG
    (checkpoint / "config.json").write_text(json.dumps(config))
    out = _export(checkpoint, tmp_path / "pkg")
    hub = builds.package("kimi_linear")
    for name in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (out / name).read_bytes() == (hub / name).read_bytes(), name


def test_mutant_rope_on_the_latent_attention_layers_fails_hf_parity(builds, tmp_path, monkeypatch):
    """transformers' KimiLinearAttention rotates nothing: RoPE (the default theta) on k_rope and q_rope
    breaks parity (measured 1.2)."""
    from gqa_export.arch import SPECS

    monkeypatch.setitem(SPECS, "kimi_linear", replace(SPECS["kimi_linear"], rope_layers="all"))
    assert not _parity(_export(builds.checkpoint("kimi_linear"), tmp_path / "pkg"), builds.checkpoint("kimi_linear"))
