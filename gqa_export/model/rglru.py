"""The RG-LRU layers' sizes (RecurrentGemma's recurrent blocks, docs/hybrid-state.md §8.15), read from
the config alone: the recurrence's width, the heads its gates are block-diagonal over, the conv kernel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError

Option = Callable[..., Any]  # dims.read_dims' opt(name, default): a config value by its spec key


@dataclass(frozen=True)
class RgLruDims:
    """W channels (lru_width), each its own scalar state; the input and recurrent gates are
    block-diagonal over `heads` blocks of W / heads channels (the attention heads' count); the
    depthwise causal conv's kernel K over the W channels."""

    width: int
    heads: int
    kernel: int

    @property
    def block(self) -> int:
        """The channels of one gate block."""
        return self.width // self.heads


def rglru_dims(opt: Option, spec: ArchSpec, mixers: list[str], hidden: int, heads: int) -> RgLruDims | None:
    """The RG-LRU shapes (None when the model has no such layer); lru_width None is hidden_size,
    as the config class resolves it. The gates' blocks must divide the width."""
    if "rglru" not in mixers:
        return None
    width = int(opt("rglru_width", 0) or hidden)
    dims = RgLruDims(width, heads, int(opt("rglru_conv_kernel", 0) or 0))
    if dims.kernel < 1 or dims.heads < 1:
        raise InputError(f"{spec.name} has RG-LRU layers but its config gives no conv1d_width/num_attention_heads")
    if dims.width % dims.heads:
        raise InputError(f"{spec.name}: lru_width {dims.width} does not divide among {dims.heads} gate blocks (heads)")
    return dims
