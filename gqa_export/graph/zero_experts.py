"""Zero-computation experts (LongCat-Flash, docs/moe.md): experts that return their input unchanged.

transformers' LongcatFlashExperts routes over `n_routed_experts + zero_expert_num` experts; an
index past the real ones is `nn.Identity`, so its contribution is the token's own input times its
routing weight. The router's dense weights [B,S,E+Z] (graph/moe.py) split into the real experts'
[B,S,E], which the MoE op runs, and the zero experts', whose sum w_z gives the term x * w_z added
to the op's output. A token whose k choices are all zero experts has no real weight: the op's
router input would be log(0) = -inf on every expert, a softmax of no finite value, so that row
reads log(1) instead and its output is scaled by the real weights' sum, 0. (onnxruntime 1.31.1's
CPU MoE happens to return a finite row for the all -inf input too: parity holds without the guard,
tests/arch/test_longcat_flash.py; the guard keeps the graph from relying on it.)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.moe import MoeDims


def zero_experts(lc: LayerContext, x: ir.Value, dense: ir.Value, moe: MoeDims) -> tuple[ir.Value, ir.Value]:
    """(the real experts' weights [B,S,E], the zero experts' term x * sum of their weights [B,S,H])."""
    b = lc.b
    with b.scope("zero_experts"):
        split = b.const([moe.experts, moe.zero_experts], "real_zero_split", "int64")
        real, zero = b.op_multi("Split", dense, split, axis=-1, outputs=2, name="real_zero")
        weight = b.op("ReduceSum", zero, b.const([-1], "last", "int64"), keepdims=1, name="zero_weight")
        return real, b.op("Mul", x, weight, name="identity_term")


def all_zero_guard(lc: LayerContext, real: ir.Value) -> ir.Value:
    """`real` with the rows whose weights are all zero set to ones (their log is then finite; the
    caller scales each row's output by its real weights' sum, 0 for those rows)."""
    b = lc.b
    with b.scope("zero_experts"):
        total = b.op("ReduceSum", real, b.const([-1], "last", "int64"), keepdims=1, name="real_weight")
        zero = b.const(np.asarray(0, NUMPY_DTYPES[lc.params.dtype]), "zero")
        one = b.const(np.asarray(1, NUMPY_DTYPES[lc.params.dtype]), "one")
        return b.op("Where", b.op("Equal", total, zero), one, real, name="no_real_expert")
