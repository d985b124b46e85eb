"""Hybrid decoders, what only they have: short-convolution layers carry a fixed-size state
(past.N.conv / present.N.conv) next to the GQA layers' KV cache. The checks every family gets
(logits and greedy tokens against HF, int4, fp16 CUDA) are LFM2's rows in tests/families.py; here:
the state is really carried from step to step (a graph that drops it fails the decode steps),
genai_config describes it the way onnxruntime-genai binds it, inspect accounts for it, the lints
catch a config the runtime would misbind, and the standard-Attention modes are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import PROMPT, FamilyBuilds
from reference import hf_logits, hf_model, ort_prefill_and_decode
from typer.testing import CliRunner

from gqa_export.cli import app

runner = CliRunner()


@pytest.fixture(scope="session")
def builds(request, checkpoints, tmp_path_factory) -> FamilyBuilds:
    return FamilyBuilds.of_session(request, checkpoints, tmp_path_factory)


def _copy(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    return to


def _parity_error(package: Path, checkpoint: Path) -> float:
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    return float(np.abs(got - hf_logits(hf_model(checkpoint), tokens, len(PROMPT))).max())


def test_genai_config_describes_the_state_as_the_runtime_binds_it(builds):
    config = json.loads((builds.package("lfm2") / "genai_config.json").read_text())["model"]["decoder"]
    assert config["layer_types"] == ["conv", "full_attention", "conv", "conv"]
    assert config["num_hidden_layers"] == 4 and config["conv_cache_size"] == 2  # kernel 3
    assert config["inputs"]["past_conv_names"] == "past.%d.conv"
    assert config["outputs"]["present_conv_names"] == "present.%d.conv"
    graph = onnx.load(str(builds.package("lfm2") / "model.onnx"), load_external_data=False).graph
    pasts = sorted(i.name for i in graph.input if i.name.startswith("past"))
    assert pasts == ["past.0.conv", "past.2.conv", "past.3.conv", "past_key_values.1.key", "past_key_values.1.value"]


def test_inspect_accounts_for_the_state(builds):
    result = runner.invoke(app, ["inspect", str(builds.package("lfm2")), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["summary"]["recurrent_state_bytes_per_row"] == 3 * 2 * 64 * 4  # 3 conv layers, K-1 x H fp32
    assert report["findings"] == []


@pytest.mark.parametrize(
    ("edit", "finding"),
    [
        (lambda d: d.update(layer_types=["conv", "conv", "conv", "full_attention"]), "state-layer-types"),
        (lambda d: d.pop("layer_types"), "state-layer-types"),
        (lambda d: d["outputs"].update(present_conv_names="present.%d.conv_state"), "state-names"),
    ],
)
def test_mutant_genai_config_fails_the_state_lints(builds, tmp_path, edit, finding):
    package = _copy(builds.package("lfm2"), tmp_path / "pkg")
    path = package / "genai_config.json"
    config = json.loads(path.read_text())
    edit(config["model"]["decoder"])
    path.write_text(json.dumps(config))
    result = runner.invoke(app, ["inspect", str(package), "--json"])
    assert result.exit_code == 1 and finding in {f["id"] for f in json.loads(result.stdout)["findings"]}


def test_mutant_graph_that_drops_the_state_fails_the_decode_steps(builds, tmp_path):
    """Each step starting from a zero state: the prompt's logits still match, decode steps do not."""
    package = _copy(builds.package("lfm2"), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "CausalConvWithState":
            node.input[3] = ""  # optional past state: zeros
    onnx.save(model, str(package / "model.onnx"))
    checkpoint = builds.checkpoint("lfm2")
    assert _parity_error(builds.package("lfm2"), checkpoint) < 1e-4
    tokens, got = ort_prefill_and_decode(package, list(PROMPT), steps=6)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    np.testing.assert_allclose(got[: len(PROMPT)], ref[: len(PROMPT)], atol=1e-4, rtol=1e-4)
    assert np.abs(got[len(PROMPT) :] - ref[len(PROMPT) :]).max() > 1e-2


def test_mutant_graph_with_swapped_gates_fails_parity(builds, tmp_path):
    """B and C of in_proj's split exchanged: a plausible layout bug, caught at the prompt."""
    package = _copy(builds.package("lfm2"), tmp_path / "pkg")
    model = onnx.load(str(package / "model.onnx"), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "Split" and node.name.endswith("split_bcx"):
            outputs = list(node.output)
            node.output[:] = [outputs[1], outputs[0], outputs[2]]
    onnx.save(model, str(package / "model.onnx"))
    assert _parity_error(package, builds.checkpoint("lfm2")) > 1e-2


@pytest.mark.parametrize("mode", ["bias", "split"])
def test_standard_attention_modes_are_refused_in_one_line(builds, tmp_path, mode):
    args = ["build", str(builds.checkpoint("lfm2")), "-o", str(tmp_path / "p"), "--attention", mode]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "short-convolution layers keep their state in the GQA graph only" in result.output
    assert not (tmp_path / "p").exists()
