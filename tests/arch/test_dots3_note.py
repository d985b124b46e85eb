"""dots3-note's decoder (docs/latent-attention.md): mutants of the mechanisms its registry row (tests/families.py:
logits, greedy tokens in every mode and the latent cache, int4/int8) proves, and its context cap.

Each mutant breaks HF parity (prompt + 2 decode steps), the registry's check, so a graph that dropped or
miswired the mechanism fails it: the sliding layer's own shapes (its softmax scale, (qk_nope + qk_rope) ** -0.5 of
its own widths, set to the indexed layers'; its latent's lora scale, sqrt(hidden / its kv_lora_rank), set to the
model's), the RMSNorm on the shared rope key and the per-head output gate (each dropped from the spec, the
checkpoint as it is). The indexer's cap is DeepSeek-V3.2's (tests/arch/test_sparse_attention.py shows HF past it
is not plain MLA): the package's context is index_topk."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from families import PROMPT, require_registered
from mutants import copy_package, edit_initializers, times
from reference import hf_logits, hf_model, ort_prefill_and_decode

from gqa_export import arch
from gqa_export.pipeline import BuildOptions, build

FAMILY = "dots3_note_text"
CAP = 128  # the tiny config's index_topk (tests/derived_moe_models.py), below max_position_embeddings 256


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


def _parity(package, checkpoint) -> bool:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=2)
    return np.allclose(got, hf_logits(hf_model(checkpoint), tokens, len(PROMPT)), atol=1e-4, rtol=1e-4)


def test_package_context_is_capped_at_index_topk(builds):
    config = json.loads((builds.package(FAMILY) / "genai_config.json").read_text())
    assert (config["model"]["context_length"], config["search"]["max_length"]) == (CAP, CAP)


def test_sliding_layer_with_the_model_scales_fails_hf_parity(builds, tmp_path):
    """Layer 1 (sliding: 2 heads, key width 40, latent 16) with layer 0's softmax scale (24 ** -0.5), then with the
    model's latent lora scale (sqrt(64 / 32) where its own is sqrt(64 / 16))."""
    assert _parity(builds.package(FAMILY), builds.checkpoint(FAMILY))
    broken = copy_package(builds.package(FAMILY), tmp_path / "scale")
    model = onnx.load(str(broken / "model.onnx"), load_external_data=False)
    nodes = {n.name: n for n in model.graph.node if n.op_type == "GroupQueryAttention"}
    first, sliding = (nodes[f"/model/layers.{i}/attn/GroupQueryAttention"] for i in (0, 1))
    (own,) = [a for a in sliding.attribute if a.name == "scale"]
    assert abs(own.f - 40**-0.5) < 1e-7
    own.f = next(a.f for a in first.attribute if a.name == "scale")
    onnx.save(model, str(broken / "model.onnx"))
    assert not _parity(broken, builds.checkpoint(FAMILY))
    broken = copy_package(builds.package(FAMILY), tmp_path / "lora")
    assert edit_initializers(broken, "const.kv_lora_scale_1", times(2**0.5 / 2))
    assert not _parity(broken, builds.checkpoint(FAMILY))


@pytest.mark.parametrize("mechanism", ["rope_key_norm", "head_gate"])
def test_spec_mutant_fails_hf_parity(builds, tmp_path, monkeypatch, mechanism):
    spec = arch.SPECS[FAMILY]
    if mechanism == "head_gate":  # LayerNames.output_gate, one row per head (Ling 3's and Laguna's gate)
        mutant = replace(spec, layer=replace(spec.layer, output_gate=None))
    else:
        mutant = replace(spec, latent_attention=replace(spec.latent_attention, **{mechanism: None}))
    monkeypatch.setitem(arch.SPECS, FAMILY, mutant)
    out = tmp_path / mechanism
    build(BuildOptions(str(builds.checkpoint(FAMILY)), out, smoke=False, text_only=True))
    assert not _parity(out, builds.checkpoint(FAMILY))
