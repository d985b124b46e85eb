"""Per-head q/k LayerNorm with each head's own weight and bias (ArchSpec qk_norm "head_layer": Chameleon).

transformers 5.25's ChameleonLayerNorm holds [heads, head_dim] weight and bias tables (each model-parallel
shard kept its own gamma / beta, repeated per head at conversion) but takes its statistics over head_dim
alone: F.layer_norm over the last axis at an eps the module hard-codes (1e-5, never the config's), then
x * W + b per head. The key norm's tables are [num_key_value_heads, head_dim]: keys are normed per kv head,
before any repeat for the query groups. Built as LayerNormalization over head_dim with unit scale, then the
stored [heads, D] weight and bias (the bias where the checkpoint holds one), broadcast over batch and sequence.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES, Params


def head_layer_norm(b: GraphBuilder, x: ir.Value, weight_name: str, params: Params, eps: float, name: str) -> ir.Value:
    """x [B,S,heads,D] normed over D, then times the stored [heads, D] weight plus the [heads, D] bias."""
    d = int(params.store.info(weight_name).shape[-1])
    ones = b.const(np.ones(d, NUMPY_DTYPES[params.dtype]), f"{name}_ones")
    y = b.op("LayerNormalization", x, ones, axis=-1, epsilon=eps, stash_type=1, name=name)
    y = b.op("Mul", y, b.initializer(weight_name, params.tensor(weight_name)), name=f"{name}_scale")
    bias_name = params.held_bias(weight_name)
    if bias_name is None:
        return y
    return b.op("Add", y, b.initializer(bias_name, params.tensor(bias_name)), name=f"{name}_shift")
