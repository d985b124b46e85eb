"""xLSTM's mLSTM sizes, read from the config (docs/hybrid-state.md §8.19).

The layer's q/k width is int(hidden * qk_dim_factor) and its value width int(hidden * v_dim_factor),
while transformers' xLSTMCache sizes its state from the config's qk_dim / v_dim, which round those
up to multiples of 64: where the two differ HF's own cached forward fails, so such a config is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


@dataclass(frozen=True)
class MlstmDims:
    """heads NH, the q/k and value widths per head, the kernel's eps (the normalizer's floor) and the
    tanh soft cap of the input and forget gate pre-activations (0: none)."""

    heads: int
    qk_head: int
    v_head: int
    eps: float
    gate_cap: float


def mlstm_dims(config: Any, opt: Callable[..., Any], spec: ArchSpec, mixers: list[str]) -> MlstmDims | None:
    """The mLSTM sizes (None when the model has no mLSTM layer); configs HF itself cannot run refused."""
    if "mlstm" not in mixers:
        return None
    hidden, heads = int(config.hidden_size), int(config.num_heads)
    if getattr(config, "weight_mode", "single") != "single" or getattr(config, "use_bias", False):
        raise InputError(
            f"{spec.name} is exported with weight_mode 'single' and no biases only (weight_mode="
            f"{getattr(config, 'weight_mode', None)!r}, use_bias={getattr(config, 'use_bias', None)!r})"
        )
    qk, v = int(hidden * float(config.qk_dim_factor)), int(hidden * float(config.v_dim_factor))
    if (qk, v) != (int(config.qk_dim), int(config.v_dim)) or qk % heads or v % heads:
        raise InputError(
            f"{spec.name}: q/k width {qk} and value width {v} must be multiples of 64 and of num_heads {heads} "
            "(transformers' xLSTMCache sizes the state from the rounded widths, so HF cannot generate otherwise)"
        )
    cap = getattr(config, "gate_soft_cap", None)
    return MlstmDims(heads, qk // heads, v // heads, float(config.eps), float(cap or 0.0))
