"""SwiGLU clipped after the activation at a limit per layer (MoeSpec activation "swiglu_limited": Ling 3's
routed and shared experts, Step3p7's form; docs/moe.md §5.1):

    y = down(min(silu(g), l) * clip(u, -l, l))        l = the layer's limit; 0: no clipping

com.microsoft.MoE clips *before* its activation, G = min(g, L), U = clip(u, -L, L), out = silu(G) * U
(activation_alpha 1, beta 0). silu is increasing wherever it exceeds its minimum (about -0.28 < 0 < l),
so min(silu(g), l) = silu(min(g, L)) exactly for L = silu^-1(l): the gate half needs only the op's
limit moved to L. The up half must still be clipped at l; the op clips it at L, so the up rows of fc1
are written times c = L / l (clip(c u, -L, L) = c clip(u, -l, l)) and the op's output is divided by c.
The shared expert is plain ops: Min and Clip as HF computes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import activation, clipped_swiglu, gated
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.params import NUMPY_DTYPES

Rows = Callable[[int, int, int], np.ndarray]  # (expert, first row, end row) -> the rows, float32


def inverse_silu(value: float) -> float:
    """The x > 0 with x * sigmoid(x) = value (value > 0), by Newton's method in float64."""
    x = max(value, 1.0)
    for _ in range(100):
        s = 1.0 / (1.0 + math.exp(-x))
        step = (x * s - value) / (s * (1.0 + x * (1.0 - s)))
        x -= step
        if abs(step) < 1e-15 * max(1.0, abs(x)):
            break
    return x


def layer_limit(lc: LayerContext, shared: bool = False) -> float:
    """This layer's limit for its routed (or shared) experts; 0: no clipping."""
    moe = lc.dims.moe
    assert moe is not None
    limits = moe.shared_limits if shared else moe.limits
    return float(limits[lc.i]) if lc.i < len(limits) else 0.0


def op_limit(limit: float) -> tuple[float, float]:
    """(the MoE op's swiglu_limit L = silu^-1(limit) as float32, the up rows' scale c = L / limit)."""
    moved = float(np.float32(inverse_silu(limit)))
    return moved, moved / limit


def scaled_up_rows(rows: Rows, scale: float) -> Rows:
    """An fc1 row reader (interleaved gate / up rows, graph/experts.py) with the up rows (odd) times scale."""

    def read(e: int, a: int, b: int) -> np.ndarray:
        block = rows(e, a, b).astype(np.float32, copy=True)
        block[(np.arange(a, b) % 2 == 1)] *= np.float32(scale)
        return block

    return read


def limited_rows(lc: LayerContext, rows: Rows, limit: float | None) -> tuple[Rows, float | None, float]:
    """(fc1's row reader, the op's swiglu_limit, the up rows' scale) for this layer: as given where the
    family's activation is not "swiglu_limited" or the layer's limit is 0, else moved past silu."""
    moe = lc.spec.moe
    if moe is None or moe.activation != "swiglu_limited" or not layer_limit(lc):
        return rows, limit, 1.0
    moved, scale = op_limit(layer_limit(lc))
    return scaled_up_rows(rows, scale), moved, scale


def unscaled(lc: LayerContext, out: ir.Value, scale: float) -> ir.Value:
    """The op's output divided by the up rows' scale (`scaled_up_rows`)."""
    inverse = lc.b.const(np.asarray(1.0 / scale, NUMPY_DTYPES[lc.params.dtype]), "limit_unscale")
    return lc.b.op("Mul", out, inverse, name="limit_unscaled")


def shared_gated(lc: LayerContext, gate: ir.Value, up: ir.Value) -> ir.Value:
    """The shared expert's min(act(gate), l) * clip(up, -l, l) at this layer's shared limit l, as HF
    computes it (Min and Clip after the activation); without one, the family's own gated product
    (graph/activations.gated)."""
    moe, spec = lc.dims.moe, lc.spec.moe
    if spec is not None and spec.shared_clipped and moe is not None and moe.limit is not None:
        return clipped_swiglu(lc, gate, up, moe.limit)  # DeepSeek-V4: clipped before the activation, as its routed ones
    limit = layer_limit(lc, shared=True)
    if not limit:
        return gated(lc, gate, up)
    b, dtype = lc.b, NUMPY_DTYPES[lc.params.dtype]
    high, low = b.const(np.asarray(limit, dtype), "limit_high"), b.const(np.asarray(-limit, dtype), "limit_low")
    limited = b.op("Min", activation(lc, gate), high, name="gate_limited")
    return b.op("Mul", limited, b.op("Clip", up, low, high, name="up_limited"), name="limited_swiglu")
