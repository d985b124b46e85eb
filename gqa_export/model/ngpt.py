"""Config facts of the nGPT layer (ArchSpec.ngpt, Dory; docs/coverage.md §16): the constants its stored
scale vectors are multiplied by, all from initializer_range (the stored vectors are s, used as
s x s_init / initializer_range) and ngpt_alpha_init."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec


@dataclass(frozen=True)
class NgptDims:
    initializer_range: float
    alpha_init: float

    def attention_rate(self) -> float:
        """lambda_1 and lambda_2's factor (HF's lambda_scale)."""
        return self.alpha_init / self.initializer_range

    def query_scale(self, head_dim: int) -> float:
        """sqk's factor before squaring (HF's sqk_scale)."""
        return head_dim**0.5 / self.initializer_range

    def gate_scale(self, hidden: int) -> float:
        """s_gate's factor before squaring (HF's s_gate_scale)."""
        return hidden**0.25 / self.initializer_range

    def logit_scale(self) -> float:
        """logit_scale's factor (HF's logit_scale_factor)."""
        return 1 / self.initializer_range


def ngpt_dims(opt: Callable[..., Any], spec: ArchSpec) -> NgptDims | None:
    if spec.ngpt is None:
        return None
    return NgptDims(float(opt("initializer_range")), float(opt("ngpt_alpha_init")))
