"""Mutants of what issue #39's classic-lineage families (gqa_export/arch/classic_derived_families.py)
changed from the spec each is a `replace()` of: with the change undone the package must lose HF
parity, the registry's check (tests/arch/test_families.py rows), so a graph that dropped the
mechanism fails it. The bounds are well under what each mutant measured (in the ids) and well over
the rows' 1e-4."""

from __future__ import annotations

from dataclasses import replace

import onnx
import pytest
from reference import parity_error

from gqa_export import arch
from gqa_export.arch.spec import AbsolutePositions
from gqa_export.pipeline import BuildOptions, build


def _mutant_error(builds, tmp_path, monkeypatch, family: str, **changes) -> float:
    monkeypatch.setitem(arch.SPECS, family, replace(arch.SPECS[family], **changes))
    build(BuildOptions(str(builds.checkpoint(family)), tmp_path / "pkg", smoke=False))
    return parity_error(tmp_path / "pkg", builds.checkpoint(family))


@pytest.mark.parametrize(
    ("family", "changes"),
    [  # measured: 5.7, 0.38, 0.95, 2.3, 5.3, 6.2
        # Jais-2's LayerNorms read as Nemotron's LayerNorm1P (1 + w)
        pytest.param("jais2", dict(norm_offset=1.0), id="jais2_norm_plus_one"),
        # GPT-NeoX-Japanese's last attention bias (dense_bias) left out
        pytest.param("gpt_neox_japanese", dict(tensor_aliases=()), id="neox_japanese_no_dense_bias"),
        # CTRL's sinusoids with fairseq's rates and zero pad row (XGLM's), its embeddings unscaled
        pytest.param(
            "ctrl", dict(positions=AbsolutePositions("pos_encoding", sinusoidal=True)), id="ctrl_fairseq_sinusoids"
        ),
        pytest.param("ctrl", dict(embedding_scale="none"), id="ctrl_unscaled_embeddings"),
        # GPT-1's post-LN read as OLMo-2's post-norm (the block's output normed before the add)
        pytest.param("openai-gpt", dict(norm_layout="post"), id="gpt1_norm_before_add"),
        # ModernBERT-decoder's prediction head (dense -> GELU -> LayerNorm) before the lm_head left out
        pytest.param("modernbert-decoder", dict(head_transform=None), id="modernbert_no_head"),
    ],
)
def test_mutant_classic_derived_mechanism_fails_parity(builds, tmp_path, monkeypatch, family, changes):
    assert _mutant_error(builds, tmp_path, monkeypatch, family, **changes) > 1e-2


def test_gpt1_afn_gelu_is_the_tanh_gelu(builds):
    """GPT-1's ACT_FNS maps afn "gelu" to gelu_new: every MLP Gelu of its package is the tanh one. (Read as
    the exact GELU, the tiny model's logits move by 1.9e-5 only, under the rows' 1e-4: checked here.)"""
    graph = onnx.load(str(builds.package("openai-gpt") / "model.onnx"), load_external_data=False).graph
    approximations = [  # com.microsoft's FastGelu is the tanh form
        "tanh"
        if node.op_type == "FastGelu"
        else next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
        for node in graph.node
        if node.op_type in ("Gelu", "FastGelu")
    ]
    assert len(approximations) == 3 and set(approximations) == {"tanh"}, approximations  # one per layer


def test_modernbert_first_layer_without_its_norm_is_read_only_where_the_spec_says(builds, tmp_path, monkeypatch):
    """Layer 0's attention norm is nn.Identity (not stored): skipped under norms_where_stored, a missing tensor
    otherwise, never a norm made up."""
    spec = arch.SPECS["modernbert-decoder"]
    monkeypatch.setitem(arch.SPECS, "modernbert-decoder", replace(spec, norms_where_stored=False))
    with pytest.raises(Exception, match=r"layers\.0\.attn_norm"):
        build(BuildOptions(str(builds.checkpoint("modernbert-decoder")), tmp_path / "pkg", smoke=False))
