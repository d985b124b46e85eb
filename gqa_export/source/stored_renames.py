"""A checkpoint's tensors under the names transformers' class gives them at load, read under those names.

Some families publish checkpoints in a layout that transformers' loader rewrites through its conversion
mapping (and partly transposes). Ergo's hub files are its training framework's serving layout
(`tok_embeddings`, `layers.{i}.attention.wqkv`, a router `feed_forward.gate_kernel` [H, E], ...); Dory's
keep the decoder under `backbone.`, the embedding as `embeddings`, the output gate as `self_attn.g_proj`,
and its released checkpoints store each decoder layer as two blocks, an attention block
`layers.{2i}.mixer.*` (+ `attn_alpha`) and an MLP block `layers.{2i+1}.mixer.*` (+ `mlp_alpha`), which
transformers' LayerPairCollapse reads as `layers.{i}.self_attn.*`, `layers.{i}.mlp.*`, `lambda_1`,
`lambda_2`. DeepSeek-V4's release keeps its reference names at the root (`embed.weight`, `layers.{i}.attn.wq_a`,
`hc_attn_fn`, `ffn.experts.{e}.w1`, ...). `ArchSpec.stored_renames` lists the rewrites in order (each a regex on
the whole stored name, its replacement, and whether the tensor is stored (in, out) and read transposed), applied
after the pair collapse where `ArchSpec.collapsed_layer_pairs`. Each stored name they change gets a view under the new
name, reading the stored tensor, so the graph and its initializer names are the same whichever layout
the checkpoint has. A checkpoint that already holds the spec's embedding is read as it is. Inkling2's serving layout
(`model.llm.*`) stores its block queries as `attn_res.attn_queries.{i}` for layer i + 1 (a replacement that is a
function of the match) and its experts' gate and up rows interleaved (`w13_weight`, row 2j gate j, 2j + 1 up j), which
transformers' Interleave(dim=1) puts apart, and Inkling's its dense MLPs' and shared experts' gate and up in one tensor,
rows alternating: row views (`ArchSpec.row_views`, source/row_views.py) read them, matched by their renamed names, and
(whatever the layout) ERNIE-4.5-VL's chunked router and bias, Step3p7's joined expert halves and Molmo2's two embedding
tables. Inkling2-Loop's keeps its message queries in two tensors (`LoopMessageNames.stored_queries`), read as the one
its class holds (`merged_message_queries`).
"""

from __future__ import annotations

import re

import numpy as np

from gqa_export.arch.spec import ArchSpec
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.row_views import row_views
from gqa_export.source.weights import TensorInfo, WeightStore

_PAIRED = re.compile(r"layers\.(\d+)\.(mixer|attn_alpha|mlp_alpha)(?=\.|$)")


def collapsed_pair(name: str) -> str:
    """transformers' LayerPairCollapse: block 2i's mixer is layer i's self_attn, block 2i + 1's its mlp."""
    match = _PAIRED.search(name)
    if match is None:
        return name
    index, module = int(match[1]), match[2]
    module = {"attn_alpha": "lambda_1", "mlp_alpha": "lambda_2"}.get(module, ("self_attn", "mlp")[index % 2])
    return f"{name[: match.start()]}layers.{index // 2}.{module}{name[match.end() :]}"


def renamed(spec: ArchSpec, name: str) -> tuple[str, bool]:
    """A stored tensor's name as its class reads it, and whether a rewrite that changed it transposes it."""
    name = collapsed_pair(name) if spec.collapsed_layer_pairs else name
    transposed = False
    for pattern, replacement, transposes in spec.stored_renames:
        new = re.sub(pattern, replacement, name)
        transposed |= transposes and new != name
        name = new
    return name, transposed


def renamed_views(store: WeightStore, spec: ArchSpec) -> WeightStore:
    """`store` with a view under its class's name of each tensor stored under another, where the checkpoint
    does not hold the spec's names already (its embedding under one of the decoder prefixes), and the views the spec's
    row views make whatever its layout (source/row_views.py)."""
    layout = bool(spec.stored_renames or spec.collapsed_layer_pairs)
    layout = layout and not any(f"{prefix}{spec.embed}" in store for prefix in spec.decoder_prefixes)
    if not (layout or spec.row_views):
        return store
    names = {name: renamed(spec, name) if layout else (name, False) for name in store.names()}
    views, matched = row_views(store, spec, names)
    for name, (new, transposed) in names.items():
        if new == name or new in store or name in matched:  # unchanged, held, or read through a row view
            continue
        info = store.info(name)
        if transposed:
            views[new] = (view_info(info, tuple(reversed(info.shape))), lambda n=name: store.read(n).T)
        else:
            views[new] = (view_info(info, info.shape), lambda n=name: store.read(n))
    if layout:
        views.update(merged_message_queries(store, spec))
    return ViewStore(store, views) if views else store


def merged_message_queries(store: WeightStore, spec: ArchSpec) -> dict[str, tuple[TensorInfo, Compute]]:
    """Inkling2-Loop's message queries [L, 4, H] (query, key, value, MLP of each loop layer) from the serving layout's
    [2L, H] pair (query | MLP per layer, key | value per layer), as transformers' Inkling2LoopMergeMessageQueries
    reads them; none where the checkpoint does not hold the pair."""
    messages = spec.block_residuals.messages if spec.block_residuals is not None else None
    if messages is None:
        return {}
    first, second = messages.stored_queries
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for name in store.names():
        other = name[: -len(first)] + second
        if not name.endswith(first) or other not in store:
            continue
        target = renamed(spec, name)[0][: -len(first)] + messages.query
        info = store.info(name)
        shape = (info.shape[0] // 2, 4, info.shape[1])
        views[target] = (view_info(info, shape), lambda a=name, b=other: _merged(store.read(a), store.read(b)))
    return views


def _merged(queries: np.ndarray, kv_queries: np.ndarray) -> np.ndarray:
    """[L, 4, H]: each layer's query, key, value and MLP queries, from its [query, MLP] and [key, value] rows."""
    pairs, kv = queries.reshape(-1, 2, queries.shape[-1]), kv_queries.reshape(-1, 2, kv_queries.shape[-1])
    return np.concatenate([pairs[:, :1], kv, pairs[:, 1:]], axis=1)
