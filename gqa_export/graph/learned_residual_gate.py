"""Learned per-channel residual gates (Ergo's ErgoResidualGate, Muse-Spark's MuseSparkResidualGate;
docs/coverage.md's Ergo and Muse-Spark sections).

Each residual add is sigmoid(w) x block + sqrt(1 + sigmoid(w)) exp(-softplus(w) / 2) x residual, w one
learned weight per hidden channel (attention_residual_gate, feedforward_residual_gate). With
a = sigmoid(w), exp(-softplus(w) / 2) = (1 + e^w)^(-1/2) = sqrt(1 - a), so the residual factor is
sqrt(1 - a^2): the two factors' squares sum to 1 on every channel. Muse-Spark's gate reads w / T (T the
config's residual_gate_temperature) and floors the residual factor's square, sigmoid(-w / T) (1 + a), at
1e-3 before its square root (ArchSpec.residual_gate_floor): the same factors of w / T, the residual one at
least sqrt(1e-3). Both are functions of a stored weight alone, so they are computed once at export (double
precision, the modeling code's formula, rounded once to the graph's dtype) and written as two vectors [H]
the graph multiplies by.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext

BRANCH, RESIDUAL = "branch_gate", "residual_gate"  # the two derived vectors, beside the stored weight


def gate_factors(w: np.ndarray, temperature: float = 1.0, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(sigmoid(w / T), sqrt(max((1 + sigmoid(w / T)) exp(-softplus(w / T)), floor))) in float64, as
    ErgoResidualGate (T 1, no floor) and MuseSparkResidualGate write them."""
    w = w.astype(np.float64) / temperature
    branch = 1.0 / (1.0 + np.exp(-w))
    residual = np.sqrt(1.0 + branch) * np.exp(-0.5 * np.logaddexp(0.0, w))
    return branch, np.maximum(residual, np.sqrt(floor)) if floor else residual


def gated_terms(
    lc: LayerContext, module: str, residual: ir.Value, block: ir.Value, name: str
) -> tuple[ir.Value, ir.Value]:
    """(residual, block) each times its per-channel factor for the gate `module` of layer lc.i, to be summed."""
    b, params = lc.b, lc.params
    weight = lc.name(module, "weight" if lc.has(module) else "gate")  # Ergo's gate.weight, Muse-Spark's gate.gate
    temperature, floor = lc.dims.residual_gate_temperature, lc.spec.residual_gate_floor
    factors = []
    for index, kind in enumerate((BRANCH, RESIDUAL)):
        make = lambda w, index=index: gate_factors(w, temperature, floor)[index].astype(np.float32)  # noqa: E731
        factors.append(b.initializer(lc.name(module, kind), params.derived(weight, make)))
    block = b.op("Mul", block, factors[0], name=f"{name}_{BRANCH}")
    return b.op("Mul", residual, factors[1], name=f"{name}_{RESIDUAL}"), block
