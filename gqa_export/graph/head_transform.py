"""A prediction head between the final norm and the lm_head: LayerNorm(act(dense(x))), the BERT-style
transform ModernBERT-decoder's `lm_head` module applies before its `decoder` projection
(ArchSpec.head_transform; docs/coverage.md §12)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.blocks import normalize
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"


def head_transform(b: GraphBuilder, x: ir.Value, spec: ArchSpec, params: Params, dims: ModelDims) -> ir.Value:
    """x unchanged without a head transform, else its norm of act(x @ W + b) (the bias where stored)."""
    if spec.head_transform is None:
        return x
    dense, norm = spec.head_transform
    with b.scope("head_transform"):
        y = b.op("MatMul", x, b.initializer(f"{dense}.weight", params.matmul_weight([f"{dense}.weight"])))
        if f"{dense}.bias" in params.store:
            y = b.op("Add", y, b.initializer(f"{dense}.bias", params.vector([f"{dense}.bias"])))
        y = typed(_activation(b, y, dims.head_act), params.dtype, [B, S, dims.hidden_size])
        return normalize(b, y, f"{norm}.weight", params, dims, "head_norm", dims.hidden_size)


def _activation(b: GraphBuilder, x: ir.Value, act: str | None) -> ir.Value:
    if act == "gelu":  # the exact (erf) GELU: ModernBERT's classifier_activation
        return b.op("Gelu", x)
    if act in ("gelu_new", "gelu_pytorch_tanh"):
        return b.op("Gelu", x, approximate="tanh")
    if act == "silu":
        return b.op("Mul", x, b.op("Sigmoid", x), name="silu")
    if act == "relu":
        return b.op("Relu", x)
    raise InputError(f"the prediction head's activation '{act}' is not supported (gelu, gelu_new, silu, relu)")
