"""A checkpoint in another layout read under the spec's names (ArchSpec.checkpoint_renames).

Some families publish checkpoints in their training framework's serving layout, which transformers'
loader renames (and partly transposes) at load through its conversion mapping: Ergo's hub files
spell tok_embeddings, layers.{i}.attention.wqkv, feed_forward.gate_kernel [H, E], ...; its own
save_pretrained(save_original_format=False) writes transformers' names. The spec lists the same
rewrites in order (each a regex on the whole stored name, its replacement, and whether the tensor
is stored (in, out) and is read transposed); each stored name they change gets a view under the new
name, reading the stored tensor, so the graph and its initializer names are the same whichever
layout the checkpoint has. A checkpoint that already holds the spec's embedding is read as it is.
"""

from __future__ import annotations

import re

from gqa_export.arch.spec import ArchSpec
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.weights import TensorInfo, WeightStore


def renamed(name: str, renames: tuple[tuple[str, str, bool], ...]) -> tuple[str, bool]:
    """`name` through every rewrite in order, and whether one of those that matched transposes it."""
    transposed = False
    for pattern, replacement, transposes in renames:
        new = re.sub(pattern, replacement, name)
        transposed |= transposes and new != name
        name = new
    return name, transposed


def renamed_views(store: WeightStore, spec: ArchSpec) -> WeightStore:
    """`store` with a view under transformers' name of each tensor the spec's renames rewrite, where the
    checkpoint does not hold the spec's names already (its embedding under one of the decoder prefixes)."""
    if not spec.checkpoint_renames or any(f"{p}{spec.embed}" in store for p in spec.decoder_prefixes):
        return store
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for name in store.names():
        new, transposed = renamed(name, spec.checkpoint_renames)
        if new == name or new in store:
            continue
        info = store.info(name)
        if transposed:
            views[new] = (view_info(info, tuple(reversed(info.shape))), lambda n=name: store.read(n).T)
        else:
            views[new] = (view_info(info, info.shape), lambda n=name: store.read(n))
    return ViewStore(store, views) if views else store
