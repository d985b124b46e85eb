"""xLSTM's own checks (tests/state_space_models.py xlstm; the checks every family gets are its row in
tests/families.py): the states in the graph, the refusals, and mutants of the mLSTM's mechanisms (the
forget gate's logsigmoid, the normalizer's floor e^(-m), the query scale, the gates' and the logits'
soft caps) that fail parity (docs/hybrid-state.md §8.19)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hybrid_checks import copy_tree, refused_build_errors
from reference import parity_error
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()
XLSTM = "xlstm"  # 2 blocks of 128, 2 heads: q/k 32, values 64


def test_xlstm_package_carries_state_only(builds):
    """Per layer n | m [B, NH, dqk + 1] and the matrix memory C [B, NH, dqk, dv], bound by the
    RecurrentState under one index; no KV cache; one Scan per layer (docs/hybrid-state.md §8.19)."""
    package = builds.package(XLSTM)
    config = json.loads((package / "genai_config.json").read_text())
    assert config["model"]["type"] == "decoder" and "layer_types" not in config["model"]["decoder"]
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    shapes = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert not [n for n in shapes if n.startswith("past_key_values")]
    assert [shapes[f"past.{i}.conv"] for i in range(2)] == [["batch_size", 2, 33]] * 2
    assert [shapes[f"past.{i}.recurrent"] for i in range(2)] == [["batch_size", 2, 32, 64]] * 2
    assert [n.op_type for n in graph.node].count("Scan") == 2
    report = json.loads(runner.invoke(app, ["inspect", str(package), "--json"]).stdout)
    assert report["summary"]["kv_cache_bytes_per_row"] == 0 and report["findings"] == []


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        ({"weight_mode": "fused"}, "xlstm is exported with weight_mode 'single' and no biases only"),
        ({"qk_dim_factor": 0.25}, "xlstm: q/k width 32 and value width 128 must be multiples of 64"),
        # the external xlstm package's kernel names (NX-AI/xLSTM-7b's config): transformers' own refusal
        ({"chunkwise_kernel": "chunkwise--triton_xl_chunk"}, "Field 'chunkwise_kernel' expected one of"),
    ],
    ids=["fused", "qk_width", "triton_kernel_names"],
)
def test_xlstm_config_it_cannot_export_is_refused_in_one_line(builds, tmp_path, edit, line):
    """Fused projections (not read), widths HF's own cache cannot hold, and kernel names transformers
    cannot load without the external package: one line, exit 2, nothing written."""
    errors = refused_build_errors(builds.checkpoint(XLSTM), tmp_path, edit)
    assert len(errors) == 1 and line in errors[0], errors


def _rewire_in_steps(model: onnx.ModelProto, node_suffix: str, to: str) -> None:
    """In every Scan body: the consumers of the node named ...node_suffix read `to` instead, where
    `to` is an input's name suffix ("mlstm_f") or another node's name suffix."""
    bodies = [a.g for n in model.graph.node if n.op_type == "Scan" for a in n.attribute if a.name == "body"]
    assert bodies
    for body in bodies:
        node = next(n for n in body.node if n.name.endswith(node_suffix))
        names = [i.name for i in body.input if i.name.endswith(to)]
        source = names[0] if names else next(n for n in body.node if n.name.endswith(to)).output[0]
        for other in body.node:
            other.input[:] = [source if i == node.output[0] else i for i in other.input]


STEP_MUTANTS = {
    "forget_gate_without_logsigmoid": ("/logsigmoid_f", "mlstm_f"),
    "normalizer_without_floor": ("/denominator_max", "/denominator_abs"),
    "query_unscaled": ("/q_scaled", "mlstm_q"),
}


@pytest.mark.parametrize(("node", "to"), STEP_MUTANTS.values(), ids=STEP_MUTANTS.keys())
def test_xlstm_mutant_step_fails_parity(builds, tmp_path, node, to):
    package = copy_tree(builds.package(XLSTM), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    _rewire_in_steps(model, node, to)
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(XLSTM)) > 1e-2


CAP_MUTANTS = {
    "gate_soft_cap_dropped": "const.gate_cap*",  # the gates' 15 tanh(x / 15) as x
    "logit_soft_cap_dropped": "const.final_softcap*",  # the logits' 30 tanh(x / 30) as x
}


@pytest.mark.parametrize("pattern", CAP_MUTANTS.values(), ids=CAP_MUTANTS.keys())
def test_xlstm_mutant_soft_cap_fails_parity(builds, tmp_path, pattern):
    from mutants import edit_initializers

    package = copy_tree(builds.package(XLSTM), tmp_path / "pkg")
    assert edit_initializers(package, pattern, lambda c: np.full_like(c, 1e4)), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(XLSTM)) > 1e-2
