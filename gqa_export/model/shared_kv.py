"""The shapes of an attention whose one KV head is key and value (DeepSeek-V4; graph/shared_kv_attention.py), and of
its compressed-KV layers (graph/compressed_kv.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.layer_dims import LayerDims

# layer type -> whether its compressed keys pool two overlapping window series (CSA) or one (HCA)
COMPRESSED_TYPES = {"compressed_sparse_attention": True, "heavily_compressed_attention": False}


@dataclass(frozen=True)
class SharedKvDims:
    """The query's low rank, the output projection's head groups and rank per group; per layer, the compressed
    keys' rate (0: a sliding layer) and whether they pool two overlapping series; CSA's index_topk."""

    q_lora_rank: int
    groups: int
    group_rank: int
    rates: tuple[int, ...] = ()
    overlapping: tuple[bool, ...] = ()
    index_topk: int = 0

    def series(self, i: int) -> int:
        """The compressor's kv_proj / gate_proj rows per token in head_dim units: 2 for CSA, 1 for HCA."""
        return 2 if self.overlapping[i] else 1

    def cache_heads(self, i: int) -> int:
        """A compressed layer's cache heads: its key (= value), then the compressor's kv and gate rows."""
        return 1 + 2 * self.series(i) if self.rates[i] else 1

    @property
    def context_cap(self) -> int:
        """The longest context where CSA's indexer keeps every complete window (index_topk x its rate); 0: none."""
        rates = {rate for rate, two in zip(self.rates, self.overlapping, strict=True) if rate and two}
        return self.index_topk * min(rates) if rates else 0


def shared_kv_dims(
    opt: Callable[..., Any], spec: ArchSpec, heads: int, layers: tuple[LayerDims, ...]
) -> tuple[SharedKvDims | None, tuple[LayerDims, ...]]:
    """Read where the spec has the attention, with the layers as it runs them: one KV head (kv_proj yields one
    whatever the config says), the sliding window on every layer, a compressed layer's cache heads."""
    if spec.shared_kv_attention is None:
        return None, layers
    types = list(opt("layer_types") or ["sliding_attention"] * len(layers))
    configured = dict(opt("compress_rates") or {})
    rates = tuple(int(configured.get(t, 0) or 0) if t in COMPRESSED_TYPES else 0 for t in types)
    for t, rate in zip(types, rates, strict=True):
        if t in COMPRESSED_TYPES and rate < 1:
            raise InputError(f"compress_rates gives {t} no positive rate ({configured.get(t)!r})")
    dims = SharedKvDims(
        int(opt("q_lora_rank")),
        int(opt("output_groups")),
        int(opt("output_group_rank")),
        rates,
        tuple(COMPRESSED_TYPES.get(t, False) for t in types),
        int(opt("index_topk", 0) or 0),
    )
    if any(dims.overlapping) and dims.index_topk < 1:
        raise InputError(f"index_topk {dims.index_topk}: CSA layers need a positive one (it sets the context)")
    if dims.groups < 1 or heads % dims.groups:
        raise InputError(f"o_groups {dims.groups} does not divide the {heads} attention heads into equal groups")
    window = int(opt("sliding_window", 0) or 0)
    layers = tuple(
        replace(x, num_kv_heads=dims.cache_heads(x.index), window=window if window > 0 else x.window) for x in layers
    )
    return dims, layers
