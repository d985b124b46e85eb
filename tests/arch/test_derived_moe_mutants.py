"""Mutants of the mechanisms the issue #39 mixtures of experts brought
(gqa_export/arch/derived_moe_families.py): each planted into a copy of the correct registry package
(tests/mutants.py) must break HF parity, the registry's check (tests/arch/test_families.py), so a
graph that dropped or miswired the mechanism fails it.

GraniteMoE-Shared: the shared MLP beside the experts (its output projection x1.5). FlexOlmo: the
post-norm after the sparse block (its weight x1.5: a graph that normed before the experts, as
OLMoE does, computes another function). Cohere2-MoE: the shared expert averaged with the routed
output (the halving x2: their sum), and two mechanisms a spec mutant drops from the graph (built with
the spec changed, the checkpoint as it is): RoPE forced on the dense prefix's full attention
(force_rope), RMSNorms where rms_norm_eps is set (LayerNorms instead), the sigmoid expert selection
(softmax weights instead). EXAONE-MoE: the selection
bias the hub keeps at mlp.e_score_correction_bias (zeroed), and its global layers without RoPE
(a spec with RoPE on every layer). DBRX: clip_qkv (the clamp's bounds x2), and its down
projections stored (in, out) (each expert's fc2 as if read (out, in): the layout bug). JetMoE: the
attention router's logits x3 (other gates), the query heads expert-major instead of kv-head-major
(each expert's heads paired with the wrong kv heads), the attention and MLP output biases dropped.
Sarvam-MoE: the selection bias the hub keeps at mlp.gate.expert_bias (zeroed) and the biases of
the stacked query_key_value (dropped). MiniMax-M2: its selection bias at
block_sparse_moe.e_score_correction_bias (zeroed) and its sigmoid scores (a spec with softmax
routing). AFMoE: the selection bias (zeroed), route_scale (halved to 1), the norm after the MLP
(x1.5), and as spec mutants the attention output gate (dropped), RoPE on the full layers (kept)
and the mup_enabled embedding scale (dropped). MiniCPM5-MoE: its selection bias (zeroed), and each
head's query and output gate of q_proj exchanged in the graph (Qwen3.5's split). MiniMax-M3: the
clamped SwiGLU of its dense MLPs and shared expert (the limit x100: unclamped; the experts' op keeps its
own), routed_scaling_factor (halved to 1), its selection bias at mlp.gate.e_score_correction_bias (zeroed).
Aria: its experts' [gate | up] halves (read as interleaved pairs) and its top-k softmax (not
renormalized), spec mutants. Laguna: its selection
bias at the hub's mlp.experts.e_score_correction_bias (zeroed), the router logits' softcap (x1000: none), and as a
spec mutant the softplus of its output gate (a sigmoid instead). Flint: a spec with RoPE on its full
layers too. HY-V3: its selection
bias (the hub's mlp.expert_bias, zeroed) and router_scaling_factor (dropped). Kolibri-1: its selection
bias (the hub's moe.router.expert_bias, zeroed), and as spec mutants the choice made on sigmoid + bias
(MiniMax-M2's) instead of logits + bias, and RoPE on its full layer.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from families import PROMPT
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode

from gqa_export import arch
from gqa_export.pipeline import BuildOptions, build

# family -> mutant -> (initializer pattern, change)
MUTANTS = {
    "granitemoeshared": {"shared-mlp-scaled": ("*.shared_mlp.output_linear.weight", times(1.5))},
    "flex_olmo": {"sparse-post-norm-scaled": ("*.post_feedforward_layernorm.weight", times(1.5))},
    "cohere2_moe": {"shared-average-dropped": ("const.half*", times(2.0))},
    "exaone_moe": {"selection-bias-zeroed": ("*.mlp.e_score_correction_bias", times(0.0))},
    "jetmoe": {
        "attention-router-scaled": ("*.self_attention.experts.router.layer.weight", times(3.0)),
        "query-heads-expert-major": ("*.self_attention.qkv_proj.weight", lambda v: _expert_major(v, 2, 4, 16)),
        "attention-bias-dropped": ("*.self_attention.o_proj.bias", times(0.0)),
        "mlp-bias-dropped": ("*.mlp.bias", times(0.0)),
    },
    "dbrx": {
        "clip-widened": ("const.clip_qkv*", times(2.0)),
        "down-read-out-in": ("*moe.fc2", lambda v: v.reshape(v.shape[0], v.shape[2], v.shape[1]).transpose(0, 2, 1)),
    },
    "sarvam_moe": {
        "selection-bias-zeroed": ("*.mlp.gate.expert_bias", times(0.0)),
        "qkv-bias-dropped": ("*.attention.query_key_value.bias", times(0.0)),
    },
    "minimax_m2": {"selection-bias-zeroed": ("*.block_sparse_moe.e_score_correction_bias", times(0.0))},
    "minicpm5_moe": {"selection-bias-zeroed": ("*.mlp.gate.e_score_correction_bias", times(0.0))},
    "minimax_m3_vl_text": {
        "dense-clamp-widened": ("const.swiglu_limit*", times(100.0)),
        "routed-scaling-dropped": ("const.routed_scaling*", times(0.5)),
        "selection-bias-zeroed": ("*.mlp.gate.e_score_correction_bias", times(0.0)),
    },
    # the hub's mlp.expert_bias, read under the spec's name; router_scaling_factor 2.5 dropped
    "hy_v3": {
        "selection-bias-zeroed": ("*.mlp.e_score_correction_bias", times(0.0)),
        "router-scaling-dropped": ("const.routed_scaling*", times(0.4)),
    },
    "kolibri1": {"selection-bias-zeroed": ("*.mlp.gate.e_score_correction_bias", times(0.0))},
    "afmoe": {
        "selection-bias-zeroed": ("*.mlp.expert_bias", times(0.0)),
        "route-scale-dropped": ("const.routed_scaling*", times(0.5)),
        "sandwich-post-mlp-norm-scaled": ("*.post_mlp_layernorm.weight", times(1.5)),
    },
    "laguna": {
        "selection-bias-zeroed": ("*.mlp.experts.e_score_correction_bias", times(0.0)),
        "router-softcap-dropped": ("const.router_softcap*", times(1000.0)),
    },
}


def _expert_major(qkv: np.ndarray, kv_heads: int, experts: int, head_dim: int) -> np.ndarray:
    """A MatMul weight [H, q | k | v] whose query columns (h, e, d) are reordered (e, h, d)."""
    width = kv_heads * experts * head_dim
    q = qkv[:, :width].reshape(-1, kv_heads, experts, head_dim).transpose(0, 2, 1, 3).reshape(-1, width)
    return np.concatenate([q, qkv[:, width:]], axis=1)


CASES = [(family, mutant) for family, mutants in MUTANTS.items() for mutant in mutants]


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", MUTANTS)
def test_the_correct_package_passes(builds, family):
    assert _parity(builds.package(family), builds.checkpoint(family))


@pytest.mark.parametrize(("family", "mutant"), CASES)
def test_mutant_moe_mechanism_fails_hf_parity(builds, tmp_path, family, mutant):
    pattern, change = MUTANTS[family][mutant]
    broken = copy_package(builds.package(family), tmp_path / mutant)
    assert edit_initializers(broken, pattern, change), pattern
    assert not _parity(broken, builds.checkpoint(family))


# mutant -> (registry row, its spec, the mechanism dropped as a spec change)
SPEC_MUTANTS = {
    "dense-prefix-rope-dropped": ("cohere2_moe", "cohere2_moe", dict(rope_layers="sliding")),
    "rms-switch-dropped": ("cohere2_moe_rms", "cohere2_moe", dict(rms_when_configured=False)),
    "global-rope-kept": ("exaone_moe", "exaone_moe", dict(rope_layers="all")),
    "sigmoid-selection-as-softmax": (
        "cohere2_moe_sigmoid",
        "cohere2_moe",
        dict(moe=replace(arch.SPECS["cohere2_moe"].moe, selections={"softmax": "softmax", "sigmoid": "softmax"})),
    ),
    "minimax-sigmoid-as-softmax": (
        "minimax_m2",
        "minimax_m2",
        dict(moe=replace(arch.SPECS["minimax_m2"].moe, routing="softmax")),
    ),
    "kolibri1-choice-on-sigmoid": (
        "kolibri1",
        "kolibri1",
        dict(moe=replace(arch.SPECS["kolibri1"].moe, routing="sigmoid_topk")),
    ),
    "kolibri1-global-rope-kept": ("kolibri1", "kolibri1", dict(rope_layers="all")),
    "afmoe-output-gate-dropped": (
        "afmoe",
        "afmoe",
        dict(layer=replace(arch.SPECS["afmoe"].layer, output_gate=None)),
    ),
    "afmoe-global-rope-kept": ("afmoe", "afmoe", dict(rope_layers="all")),
    "afmoe-mup-scale-dropped": ("afmoe", "afmoe", dict(embedding_scale="none")),
    # Aria: the experts' [gate | up] halves read as gpt-oss's interleaved pairs; the top-k softmax not renormalized
    "aria-halves-as-interleaved": (
        "aria_text",
        "aria_text",
        dict(
            moe=replace(
                arch.SPECS["aria_text"].moe,
                names=replace(arch.SPECS["aria_text"].moe.names, transposed_order="interleaved"),
            )
        ),
    ),
    "aria-top-k-not-renormalized": (
        "aria_text",
        "aria_text",
        dict(moe=replace(arch.SPECS["aria_text"].moe, normalize=False)),
    ),
    "laguna-softplus-gate-as-sigmoid": ("laguna", "laguna", dict(output_gate_activation="sigmoid")),
    "flint-full-layer-rope-kept": ("flint", "flint", dict(rope_layers="all")),
}


@pytest.mark.parametrize("mutant", SPEC_MUTANTS)
def test_spec_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mutant):
    row, spec_name, change = SPEC_MUTANTS[mutant]
    assert _parity(builds.package(row), builds.checkpoint(row))
    spec = arch.SPECS[spec_name]
    monkeypatch.setitem(arch.SPECS, spec.name, replace(spec, **change))
    out = tmp_path / mutant
    build(BuildOptions(str(builds.checkpoint(row)), out, smoke=False, text_only=True))
    assert not _parity(out, builds.checkpoint(row))


def test_minicpm5_moe_query_and_gate_exchanged_fails_hf_parity(builds, tmp_path):
    """q_proj's heads are [query | gate]: a graph that takes the gate half as the query (and the query
    half as the gate) computes another function."""
    import onnx

    broken = copy_package(builds.package("minicpm5_moe"), tmp_path / "pkg")
    model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
    splits = [node for node in model.graph.node if node.op_type == "Split" and node.name.endswith("q_gate_split")]
    assert splits
    for node in splits:
        outputs = list(node.output)
        node.output[:2] = [outputs[1], outputs[0]]
    onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint("minicpm5_moe"))
