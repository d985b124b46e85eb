"""dots.llm1 (dots1): what its registry row of tests/families.py does not check (its right-padded
batch in every attention mode is a registry check too): where its layers and windows sit, and
mutants of the mechanisms it combines (Qwen3's q/k norms and sliding layers, DeepSeek-V3's grouped
sigmoid routing with its selection bias, shared experts) that fail parity. The tiny config is
tests/llama_like_models.py's "dots1": windows of 8 on layers 1-2, shorter than the prompts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from families import FamilyBuilds, require_registered
from mutants import edit_initializers
from reference import (
    ort_prefill_and_decode,
    parity_error,
)

FAMILY = "dots1"


@pytest.fixture(autouse=True)
def _registered() -> None:
    require_registered(FAMILY)


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


# families whose HF router computes in fp32 whatever the model dtype (spec router_dtype "float32",
# docs/moe.md §8.3), and one whose router runs in the model's dtype
FP32_ROUTERS = ("dots1", "glm4_moe", "ernie4_5_moe", "hunyuan_v1_moe", "deepseek_v3")
NARROW_ROUTER = "qwen3_moe"
FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16


def _router_dtypes(package: Path) -> tuple[list[int], list[int], list[int]]:
    """The element types of the routers' weights, of their selection biases, and of the MoE ops'
    token inputs (MoE / QMoE input 0, as produced by the graph's value_info or initializers)."""
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    inits = {t.name: t.data_type for t in graph.initializer}
    routers = [inits[n.input[1]] for n in graph.node if n.name.endswith("router/logits/MatMul")]
    biases = [t for name, t in inits.items() if name.endswith("e_score_correction_bias")]
    experts = [inits[n.input[2]] for n in graph.node if n.op_type == "MoE"]
    return routers, biases, experts


@pytest.mark.parametrize("family", [*FP32_ROUTERS, NARROW_ROUTER])
def test_fp16_package_routes_in_fp32_where_hf_does(builds, family):
    """fp16 package: the routers HF computes in fp32 (F.linear(x.float(), W.float()), weight and
    selection bias kept fp32; HunYuan-MoE's gate.wg declared fp32) are an fp32 MatMul and fp32
    routing; the experts stay fp16. Qwen3-MoE's router runs in the model's dtype in HF, so in fp16
    here too."""
    require_registered(family)
    routers, biases, experts = _router_dtypes(builds.package(family, ep="cuda", precision="fp16"))
    wide = family in FP32_ROUTERS
    assert routers and set(routers) == {FLOAT if wide else FLOAT16}
    assert set(biases) <= {FLOAT if wide else FLOAT16}
    assert experts and set(experts) == {FLOAT16}


def test_cuda_int4_package_keeps_the_fp32_router_float(builds):
    """int4 for CUDA (fp16 activations): the experts become QMoE, the fp32 router stays an fp32
    MatMul (not MatMulNBits), as HF keeps its weight in fp32; the package runs (on CPU here)."""
    package = builds.package(FAMILY, ep="cuda", precision="int4")
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    inits = {t.name: t.data_type for t in graph.initializer}
    routers = [n for n in graph.node if n.name.endswith("router/logits/MatMul")]
    assert [n.op_type for n in routers] == ["MatMul", "MatMul"]
    assert {inits[n.input[1]] for n in routers} == {FLOAT}
    assert sum(n.op_type == "QMoE" for n in graph.node) == 2
    _, logits = ort_prefill_and_decode(package, [0, 17, 45, 99], steps=2)
    assert np.isfinite(logits).all()


def test_mutant_router_in_export_dtype_fails_the_fp32_check(builds, tmp_path, monkeypatch):
    """The same fp16 build with the fp32 routing context switched off: its routers are fp16, which
    test_fp16_package_routes_in_fp32_where_hf_does rejects."""
    import gqa_export.graph.moe as moe
    from gqa_export.pipeline import BuildOptions, build

    monkeypatch.setattr(moe, "_routing_context", lambda lc: lc)
    package = tmp_path / "pkg"
    build(BuildOptions(str(builds.checkpoint(FAMILY)), package, ep="cuda", precision="fp16", smoke=False))
    routers, biases, _ = _router_dtypes(package)
    assert routers and set(routers) == set(biases) == {FLOAT16}


def test_quantize_command_keeps_the_fp32_router_of_an_fp16_package(builds, tmp_path):
    """`gqa-export quantize` of the fp16 CUDA package to int4 gives what build --precision int4
    gives: the fp32 router stays an fp32 MatMul (the in-memory mark build put on it is not saved
    with the package, so requantize sets it again), and the package runs."""
    from gqa_export.quant.quantize import QuantOptions
    from gqa_export.requantize import requantize

    source = builds.package(FAMILY, ep="cuda", precision="fp16")
    out = tmp_path / "int4"
    requantize(source, out, "int4", QuantOptions(), smoke=False)
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    inits = {t.name: t.data_type for t in graph.initializer}
    routers = [n for n in graph.node if n.name.endswith("router/logits/MatMul")]
    assert [n.op_type for n in routers] == ["MatMul", "MatMul"]
    assert {inits[n.input[1]] for n in routers} == {FLOAT}
    _, logits = ort_prefill_and_decode(out, [0, 17, 45, 99], steps=2)
    assert np.isfinite(logits).all()


def test_fp16_ungated_experts_route_in_fp32(builds):
    """Nemotron-H's router computes in fp32 in HF (NemotronHTopkRouter): in the fp16 package its
    router MatMul and correction bias are fp32, the plain-op experts' weights fp16."""
    package = builds.package("nemotron_h_moe", ep="cuda", precision="fp16")
    routers, biases, _ = _router_dtypes(package)
    assert routers and set(routers) == set(biases) == {FLOAT}
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    experts = [t.data_type for t in graph.initializer if "up_stacked" in t.name or "down_side_by_side" in t.name]
    assert experts and set(experts) == {FLOAT16}
