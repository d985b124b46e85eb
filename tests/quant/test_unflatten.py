"""A quantized tied lm_head reads [B, S, H] itself (quant/unflatten.py, issue #40).

The float graph flattens the hidden states for the tied Gemm and reshapes the logits back; once the
Gemm is a MatMulNBits both Reshapes go, and with them a copy of the whole logits tensor. The numbers
must not move: the package with the Reshapes kept (the rewrite turned off) gives the same logits,
prompt and decode, full and last-token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from reference import ort_prefill_and_decode

from gqa_export.pipeline import BuildOptions, build
from gqa_export.request.records import IoOptions

TRAINED = Path(__file__).parents[1] / "data" / "tiny-trained"  # tied embedding
PROMPT = [3, 17, 42, 99, 7, 250, 64, 31]


def _build(out: Path, precision: str, prune: bool = False) -> Path:
    build(BuildOptions(str(TRAINED), out, precision=precision, smoke=False, io=IoOptions(prune_lm_head=prune)))
    return out


def _logits_writer(package: Path) -> onnx.NodeProto:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    return next(n for n in graph.node if "logits" in n.output)


@pytest.mark.parametrize(("precision", "prune"), [("int4", False), ("int8", False), ("int4", True)])
def test_tied_head_is_unflattened_and_computes_the_same(tmp_path, monkeypatch, precision, prune):
    ours = _build(tmp_path / "ours", precision, prune)
    writer = _logits_writer(ours)
    assert writer.op_type == "MatMulNBits", writer.op_type
    graph = onnx.load(str(ours / "model.onnx"), load_external_data=False).graph
    assert not any("lm_head" in n.name and n.op_type == "Reshape" for n in graph.node)

    monkeypatch.setattr("gqa_export.stages.graphs.unflatten_matmul_nbits", lambda model: 0)
    kept = _build(tmp_path / "kept", precision, prune)
    assert _logits_writer(kept).op_type == "Reshape"  # the form before the rewrite
    _, got = ort_prefill_and_decode(ours, PROMPT, steps=3)
    _, want = ort_prefill_and_decode(kept, PROMPT, steps=3)
    assert got.shape == want.shape and np.abs(want).max() > 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_a_reshape_to_another_shape_is_kept(tmp_path):
    """The rewrite only fires where MatMulNBits(x) gives the reshape's shape by itself."""
    import onnx_ir as ir

    from gqa_export.quant.unflatten import unflatten_matmul_nbits

    model = ir.load(str(_build(tmp_path / "p", "int4") / "model.onnx"))
    head = next(n for n in model.graph if n.op_type == "MatMulNBits" and "logits" in [o.name for o in n.outputs])
    assert unflatten_matmul_nbits(model) == 0  # already rewritten: nothing left to match
    x = head.inputs[0]
    flat = ir.node("Reshape", [x, ir.val("flat_shape", const_value=ir.tensor(np.array([-1, 96], np.int64)))])
    for value in flat.outputs:
        value.name = "flat"
    model.graph.insert_before(head, flat)
    head.replace_input_with(0, flat.outputs[0])
    assert unflatten_matmul_nbits(model) == 0  # no unflattening Reshape after it: left as it is
    assert head.inputs[0] is flat.outputs[0]
