"""Weights computed from stored ones at read time, for a mixture of attention heads (JetMoE's MoA,
arch/expert_attention.py): the graph then reads them as an ordinary fused qkv and output projection.

Per layer, from the experts' query projections Wq [E, kv_heads * D, H], the fused kv_proj
[2 kv_heads D, H] and the output projections Wo [E, H, kv_heads * D]:
- qkv [(E + 2) kv_heads D, H]: every expert's queries, kv-head-major (row (h, e, d) is Wq[e, h D + d],
  so GroupQueryAttention's grouping of E consecutive query heads per kv head gives expert e's head h
  kv head h, as HF's `repeat` of the kv heads does), then kv_proj's [k | v];
- o [H, kv_heads E D]: Wo with its columns in the same (h, e, d) order; its bias is the experts' bias.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.arch.spec import ArchSpec
from gqa_export.source.weights import TensorInfo, WeightStore

Compute = Callable[[], np.ndarray]


class ViewStore(WeightStore):
    """A store with tensors computed from the base store's (the base's own tensors read as before).
    One computed tensor is kept at a time: a layer's weight is read in blocks, then the next one's."""

    def __init__(self, base: WeightStore, views: dict[str, tuple[TensorInfo, Compute]]) -> None:
        super().__init__({**base._tensors, **{name: info for name, (info, _) in views.items()}})
        self._views = {name: compute for name, (_, compute) in views.items()}
        self._base = base
        self._last: tuple[str, np.ndarray] | None = None

    def view(self, name: str) -> np.ndarray:
        if name not in self._views:
            return self._base.view(name)
        if self._last is None or self._last[0] != name:
            self._last = (name, np.ascontiguousarray(self._views[name]()))
        return self._last[1]


def attention_expert_views(store: WeightStore, spec: ArchSpec, config: Any) -> WeightStore:
    """`store` with each layer's computed qkv and o weights (and o's bias) named as the spec's
    AttentionExpertNames says."""
    names = spec.attention_experts
    assert names is not None
    kv_heads, head_dim = int(config.num_key_value_heads), int(config.kv_channels)
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for i in range(int(config.num_hidden_layers)):
        queries, outputs = spec.layer_tensor(i, names.queries), spec.layer_tensor(i, names.outputs)
        kv, bias = spec.layer_tensor(i, names.kv), spec.layer_tensor(i, names.bias, "")
        q_info, o_info = store.info(queries), store.info(outputs)
        experts, hidden = q_info.shape[0], q_info.shape[2]
        width = kv_heads * experts * head_dim

        def qkv(q: str = queries, k: str = kv, e: int = experts, h: int = hidden) -> np.ndarray:
            stacked = store.read(q).reshape(e, kv_heads, head_dim, h).transpose(1, 0, 2, 3).reshape(-1, h)
            return np.concatenate([stacked, store.read(k)], axis=0)

        def o(out: str = outputs, e: int = experts, h: int = hidden) -> np.ndarray:
            return store.read(out).reshape(e, h, kv_heads, head_dim).transpose(1, 2, 0, 3).reshape(h, -1)

        kv_rows = store.info(kv).shape[0]
        views[spec.layer_tensor(i, names.qkv)] = (view_info(q_info, (width + kv_rows, hidden)), qkv)
        views[spec.layer_tensor(i, names.o)] = (view_info(o_info, (hidden, width)), o)
        bias_info = store.info(bias)
        views[spec.layer_tensor(i, names.o, "bias")] = (
            view_info(bias_info, bias_info.shape),
            lambda b=bias: store.read(b),
        )
    return ViewStore(store, views)


def view_info(source: TensorInfo, shape: tuple[int, ...]) -> TensorInfo:
    """A computed tensor's entry: the source's dtype, no bytes in any shard (never released)."""
    return TensorInfo(name="<computed>", shard=Path(source.shard), dtype=source.dtype, shape=tuple(shape))
