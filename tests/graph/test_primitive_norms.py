"""RMSNorm as primitive ops for TensorRT-RTX (graph/primitive_norms.py, docs/eps.md §2.8): the
decomposition computes what ORT's SimplifiedLayerNormalization computes, a TensorRT-RTX package
holds no op outside the record's list and runs on CPU like HF, and the planted bugs (a norm left
undecomposed, the weight forgotten) fail the build, `inspect` or the parity bound."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from reference import hf_logits, hf_model, ort_prefill_and_decode

from gqa_export.check.report import inspect_package
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph import primitive_norms
from gqa_export.pipeline import BuildOptions, build

TRT = EPS["trt-rtx"]
PROMPT = [1, 17, 93, 5, 250, 41, 8, 77, 3, 120, 64, 9, 200, 31]
FP16_BOUND = 3e-2  # relative to max |HF logit| (tests/base/test_eps.py)
NUMPY = {ir.DataType.FLOAT: np.float32, ir.DataType.FLOAT16: np.float16}


def _norm_model(dtype: ir.DataType, axis: int, shape: tuple[int, ...]) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(dtype), shape=ir.Shape(shape))
    rng = np.random.default_rng(0)
    weight = ir.Value(
        name="w", const_value=ir.Tensor((1 + 0.3 * rng.standard_normal(shape[axis:])).astype(NUMPY[dtype]))
    )
    attributes = ir.convenience.convert_attributes({"axis": axis, "epsilon": 1e-5, "stash_type": 1})
    node = ir.Node("", "SimplifiedLayerNormalization", [x, weight], attributes=attributes, name="norm", num_outputs=1)
    node.outputs[0].name, node.outputs[0].type, node.outputs[0].shape = "y", ir.TensorType(dtype), ir.Shape(shape)
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[weight], opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


def _run(model: ir.Model, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0].astype(np.float32)


@pytest.mark.parametrize(
    ("dtype", "axis"), [(ir.DataType.FLOAT, -1), (ir.DataType.FLOAT16, -1), (ir.DataType.FLOAT16, -2)]
)
def test_primitive_norm_computes_the_contrib_op(dtype, axis):
    """The decomposed norm = ORT's SimplifiedLayerNormalization on the same input (fp32 statistics,
    then the weight in the activation dtype: ORT's CPU kernel rounds the same way); only ops of
    TensorRT-RTX's list remain."""
    shape = (2, 5, 64)
    x = (np.random.default_rng(1).standard_normal(shape) * 3).astype(NUMPY[dtype])
    model = _norm_model(dtype, axis, shape)
    want = _run(model, x)
    assert primitive_norms.decompose_norms(model) == 1
    ops = {n.op_type for n in model.graph}
    assert "SimplifiedLayerNormalization" not in ops and ops <= TRT.only_ops
    got = _run(model, x)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()  # measured 0 for all three


def test_mutant_norm_over_the_last_axis_only_fails(monkeypatch):
    """axis -2 normalizes over the last two axes; statistics over the last one alone are caught."""
    decompose = primitive_norms._decompose

    def last_axis_only(node: ir.Node, root: ir.Graph) -> None:
        node.attributes["axis"] = ir.AttrInt64("axis", -1)
        decompose(node, root)

    monkeypatch.setattr(primitive_norms, "_decompose", last_axis_only)
    shape = (2, 5, 64)
    x = (np.random.default_rng(1).standard_normal(shape) * 3).astype(np.float16)
    model = _norm_model(ir.DataType.FLOAT16, -2, shape)
    want = _run(model, x)
    primitive_norms.decompose_norms(model)
    assert np.abs(_run(model, x) - want).max() > 1e-2 * np.abs(want).max()


def _parity(package, checkpoint) -> tuple[float, float]:
    tokens, got = ort_prefill_and_decode(package, PROMPT, steps=4)
    ref = hf_logits(hf_model(checkpoint), tokens, len(PROMPT))
    return float(np.abs(got - ref).max()), FP16_BOUND * max(1.0, float(np.abs(ref).max()))


def test_trt_rtx_package_holds_primitive_norms_and_runs_like_hf(exports, checkpoints):
    """fp16: every norm decomposed (2 layers x 2 + the final one), recorded in the manifest and shown
    by `inspect`; on CPU within the fp16 bound of HF (measured 0.025 against a bound of 0.17; the
    contrib-op graph: 0.018)."""
    package = exports.get("base", ep="trt-rtx", precision="fp16")
    report = inspect_package(package)
    assert report["summary"]["ep_forms"] == {"primitive_norms": 5}
    ops = report["summary"]["graphs"][0]["ops"]
    assert "SimplifiedLayerNormalization" not in ops and set(ops) <= TRT.only_ops and ops["Pow"] == 5
    error, bound = _parity(package, checkpoints.get("base"))
    assert error < bound, f"max |ORT - HF| = {error}"


def _forget_weight(decompose):
    """The mutant decomposition: the norm's weight never applied (its final Mul bypassed)."""

    def planted(node: ir.Node, root: ir.Graph) -> None:
        graph = node.graph
        decompose(node, root)
        last = next(n for n in reversed(list(graph)) if n.op_type == "Mul" and n.name.startswith(node.name or ""))
        out, unweighted = last.outputs[0], last.inputs[0]
        name = out.name
        ir.convenience.replace_all_uses_with(out, unweighted, replace_graph_outputs=True)
        graph.remove(last, safe=True)
        unweighted.name = name

    return planted


def test_mutant_forgotten_norm_weight_fails_the_bound(checkpoints, tmp_path, monkeypatch):
    """Measured 7.4 against the 0.17 bound."""
    monkeypatch.setattr(primitive_norms, "_decompose", _forget_weight(primitive_norms._decompose))
    build(BuildOptions(str(checkpoints.get("base")), tmp_path / "m", ep="trt-rtx", precision="fp16", smoke=False))
    error, bound = _parity(tmp_path / "m", checkpoints.get("base"))
    assert error > bound


def test_mutant_undecomposed_norm_is_refused_and_flagged(checkpoints, tmp_path, monkeypatch):
    """A norm left as the contrib op: the build refuses before writing; a package written anyway
    (the build's checks bypassed) is flagged by `inspect`."""
    from gqa_export.stages import finish
    from gqa_export.stages import graphs as graph_stage

    monkeypatch.setattr(graph_stage, "decompose_for", lambda ep, models: 0)
    options = BuildOptions(str(checkpoints.get("base")), tmp_path / "x", ep="trt-rtx", precision="fp16", smoke=False)
    with pytest.raises(InputError, match="SimplifiedLayerNormalization has no trt-rtx kernel"):
        build(options)
    assert not (tmp_path / "x").exists()
    monkeypatch.setattr(graph_stage, "check_ep_graph", lambda ep, models: None)
    monkeypatch.setattr(finish, "check_written", lambda *args, **kwargs: [])
    build(options)
    found = [f["message"] for f in inspect_package(tmp_path / "x")["findings"] if f["id"] == "ep-unsupported-op"]
    assert found == ["model.onnx: SimplifiedLayerNormalization has no trt-rtx kernel"]
