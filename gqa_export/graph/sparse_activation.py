"""Gaussian top-k activation sparsity of an MLP gate (docs/gemma3n.md §1.5).

HF keeps the gate activations above a cutoff that assumes they are normal over the channels:
`cutoff = mean + std * icdf(target)` per token (std the biased one, over the last axis), then
`relu(gate - cutoff)` before the activation. Plain ops compute it exactly; the quantile is a
constant computed at export time (model/stream.py, sparsity_multiplier)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES
from gqa_export.model.stream import sparsity_multiplier


def gaussian_top_k(b: GraphBuilder, gate: ir.Value, sparsity: float, dtype: ir.DataType) -> ir.Value:
    """relu(gate - (mean + std * icdf(sparsity))) over the last axis."""
    axes = b.const([-1], "channel_axis", "int64")
    mean = b.op("ReduceMean", gate, axes, keepdims=1, name="gate_mean")
    centred = b.op("Sub", gate, mean, name="gate_centred")
    variance = b.op("ReduceMean", b.op("Mul", centred, centred), axes, keepdims=1, name="gate_variance")
    multiplier = b.const(np.asarray(sparsity_multiplier(sparsity), NUMPY_DTYPES[dtype]), "std_multiplier")
    cutoff = b.op("Add", mean, b.op("Mul", b.op("Sqrt", variance, name="gate_std"), multiplier), name="cutoff")
    return b.op("Relu", b.op("Sub", gate, cutoff), name="gaussian_top_k")
