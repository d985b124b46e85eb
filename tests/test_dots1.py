"""dots.llm1 (dots1): what its registry row of tests/families.py does not check. A right-padded batch
of two in every attention mode (ORT logits row by row in gqa, onnxruntime-genai greedy tokens in
each), where its layers and windows sit, and mutants of the mechanisms it combines (Qwen3's q/k
norms and sliding layers, DeepSeek-V3's grouped sigmoid routing with its selection bias, shared
experts) that fail parity. The tiny config is tests/llama_like_models.py's "dots1": windows of 8
on layers 1-2, shorter than the prompts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import BY_NAME, REGISTERED, FamilyBuilds
from mutants import edit_initializers
from reference import (
    assert_varied,
    genai_padded_batch_greedy,
    hf_generate,
    hf_logits,
    hf_model,
    ort_padded_batch,
    parity_error,
)

FAMILY = "dots1"
MODES = ("gqa", "bias", "split")
# both rows longer than the window (8); the second one 13 tokens, the first padded by 8
RAGGED = ([0, 45, 319, 81, 17], [(7 * i + 3) % 380 for i in range(13)])
RAGGED_DECODE = ([17, 99, 3, 250], [64, 12, 200, 7])
PAD, ORT_PAD = 5, 9  # genai pads with pad_token_id; ORT runs read the padding from the mask alone


@pytest.fixture(autouse=True)
def _registered() -> None:
    if BY_NAME[FAMILY] not in REGISTERED:
        pytest.skip(f"{FAMILY} needs a newer transformers")


@pytest.mark.parametrize("mode", MODES)
def test_ragged_batch_matches_hf_row_by_row(builds, mode):
    """Batch 2 right-padded as genai pads it: ORT logits of each row (prompt and 4 decode steps)
    within 1e-4 of HF on the unpadded row (gqa, whose graph ORT runs directly), and genai's greedy
    tokens of each row equal to HF generate on it (every mode)."""
    package, model = builds.package(FAMILY, mode), hf_model(builds.checkpoint(FAMILY))
    if mode == "gqa":
        got = ort_padded_batch(package, list(RAGGED), list(RAGGED_DECODE), ORT_PAD)
        for row, prompt in enumerate(RAGGED):
            want = hf_logits(model, prompt + RAGGED_DECODE[row], len(prompt))
            np.testing.assert_allclose(got[row], want, atol=1e-4)
    sequences = genai_padded_batch_greedy(package, list(RAGGED), PAD, 16)
    assert sequences == [hf_generate(model, prompt, 16) for prompt in RAGGED]
    assert_varied(sequences)


def test_layers_windows_and_experts_sit_where_configured(builds):
    """Layer 0 full attention with a dense MLP (first_k_dense_replace 1); layers 1-2 sliding (window
    8, from max_window_layers 1) with experts, 3 of 12 each."""
    graph = onnx.load(str(builds.package(FAMILY) / "model.onnx"), load_external_data=False).graph
    windows = [_attribute(n, "local_window_size") for n in graph.node if n.op_type == "GroupQueryAttention"]
    moe = [(_layer(n), _attribute(n, "k")) for n in graph.node if n.op_type == "MoE"]
    assert windows == [-1, 8, 8]
    assert moe == [(1, 3), (2, 3)]


def _attribute(node: onnx.NodeProto, name: str) -> int:
    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def _layer(node: onnx.NodeProto) -> int:
    return int(node.name.split("/")[2].split(".")[1])


def _bypass(node_suffix: str, source: int = 0) -> Callable[[onnx.ModelProto], int]:
    """A graph edit: the nodes named ...node_suffix left out (their consumers read their input
    `source` instead)."""

    def edit(model: onnx.ModelProto) -> int:
        nodes = [n for n in model.graph.node if n.name.endswith(node_suffix)]
        for node in nodes:
            for other in model.graph.node:
                other.input[:] = [node.input[source] if i == node.output[0] else i for i in other.input]
        return len(nodes)

    return edit


def _windows_dropped(model: onnx.ModelProto) -> int:
    """Every layer attends over the whole cache (the sliding layers' window of 8 ignored)."""
    attention = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    nodes = [n for n in attention if _attribute(n, "local_window_size") > 0]
    for node in nodes:
        next(a for a in node.attribute if a.name == "local_window_size").i = -1
    return len(nodes)


GRAPH_MUTANTS: dict[str, Callable[[onnx.ModelProto], int]] = {
    "window_dropped": _windows_dropped,
    "q_norm_dropped": _bypass("attn/q_norm"),
    "groups_ignored": _bypass("grouped_router/masked", source=1),  # top k over every expert
    "not_renormalized": _bypass("grouped_router/renormalized"),
    "shared_experts_dropped": _bypass("mlp/add_shared_expert"),
}


@pytest.mark.parametrize("mutant", GRAPH_MUTANTS, ids=GRAPH_MUTANTS.keys())
def test_mutant_graph_fails_parity(builds, tmp_path, mutant):
    package, model = _mutated(builds, tmp_path)
    assert GRAPH_MUTANTS[mutant](model), f"{mutant} changed nothing"
    onnx.save(model, str(package / "model.onnx"))
    assert parity_error(package, builds.checkpoint(FAMILY)) > 1e-2


INITIALIZER_MUTANTS: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "selection_bias_dropped": ("*e_score_correction_bias", lambda b: b * 0),
    "selection_bias_flipped": ("*e_score_correction_bias", lambda b: -b),
    "one_group_kept": ("const.groups_kept", lambda k: k - 1),
    "routed_scaling_x1.5": ("const.routed_scaling", lambda f: f * 1.5),
}


@pytest.mark.parametrize("mutant", INITIALIZER_MUTANTS, ids=INITIALIZER_MUTANTS.keys())
def test_mutant_initializers_fail_parity(builds, tmp_path, mutant):
    pattern, change = INITIALIZER_MUTANTS[mutant]
    package, _ = _mutated(builds, tmp_path)
    assert edit_initializers(package, pattern, change), f"{pattern} matched nothing"
    assert parity_error(package, builds.checkpoint(FAMILY)) > 1e-2


def _mutated(builds: FamilyBuilds, tmp_path: Path) -> tuple[Path, onnx.ModelProto]:
    package = Path(shutil.copytree(builds.package(FAMILY), tmp_path / "pkg"))
    return package, onnx.load(str(package / "model.onnx"), load_external_data=False)
