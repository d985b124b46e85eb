"""The shapes of an attention whose one KV head is key and value (DeepSeek-V4; graph/shared_kv_attention.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


@dataclass(frozen=True)
class SharedKvDims:
    """The query's low rank, and the output projection's head groups and rank per group."""

    q_lora_rank: int
    groups: int
    group_rank: int


def shared_kv_dims(opt: Callable[..., Any], spec: ArchSpec, heads: int) -> SharedKvDims | None:
    """Read where the spec has the attention; the heads must split into the output projection's groups."""
    if spec.shared_kv_attention is None:
        return None
    dims = SharedKvDims(int(opt("q_lora_rank")), int(opt("output_groups")), int(opt("output_group_rank")))
    if dims.groups < 1 or heads % dims.groups:
        raise InputError(f"o_groups {dims.groups} does not divide the {heads} attention heads into equal groups")
    return dims
