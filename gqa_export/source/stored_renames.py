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
transformers' Interleave(dim=1) puts apart: `ArchSpec.stored_interleaved` names the renamed tensors read so.
Inkling's keeps its dense MLPs' and shared experts' gate and up in one tensor, rows alternating
(`ArchSpec.stored_split`, read as two); Inkling2-Loop's keeps its message queries in two tensors
(`LoopMessageNames.stored_queries`), read as the one its class holds (`merged_message_queries`).
Molmo2's release stores its embedding as two tables, the vocabulary's rows and the additional ones
(`transformer.wte.embedding`, `transformer.wte.new_embedding`), which its class concatenates at load:
`ArchSpec.stored_concatenations`.
"""

from __future__ import annotations

import re

import numpy as np

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.source.expert_views import Compute, ViewStore, view_info
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
    does not hold the spec's names already (its embedding under one of the decoder prefixes)."""
    if not (spec.stored_renames or spec.collapsed_layer_pairs or spec.stored_concatenations):
        return store
    if any(f"{prefix}{spec.embed}" in store for prefix in spec.decoder_prefixes):
        return store
    views = concatenated_views(store, spec)
    for name in store.names():
        new, transposed = renamed(spec, name)
        if new == name or new in store:
            continue
        info = store.info(name)
        halves = split_names(spec, new)
        if halves is not None:  # Inkling's w13: rows 0, 2, ... the gate, 1, 3, ... the up
            shape = (*info.shape[:-2], info.shape[-2] // 2, info.shape[-1])
            for start, half in enumerate(halves):
                views[half] = (view_info(info, shape), lambda n=name, s=start: store.read(n)[..., s::2, :])
        elif transposed:
            views[new] = (view_info(info, tuple(reversed(info.shape))), lambda n=name: store.read(n).T)
        elif spec.stored_interleaved is not None and re.search(spec.stored_interleaved, new):
            views[new] = (view_info(info, info.shape), lambda n=name: deinterleaved(store.read(n)))
        else:
            views[new] = (view_info(info, info.shape), lambda n=name: store.read(n))
    views.update(merged_message_queries(store, spec))
    return ViewStore(store, views) if views else store


def chunked_views(store: WeightStore, spec: ArchSpec) -> WeightStore:
    """`store` with a view of each equal dim-0 chunk of a stored tensor `ArchSpec.stored_chunks` matches (transposed
    first where its rule says so) under the name its rule gives that chunk, where the checkpoint does not hold that
    name already (ERNIE-4.5-VL's hub `mlp.moe_statics.e_score_correction_bias` [2, E]: row 0 the text experts', row 1
    the vision experts', as transformers' Chunk(dim=0) reads them; its `mlp.gate.weight` [H, E] transposed)."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for name in store.names():
        rule = next((rule for rule in spec.stored_chunks if re.search(rule[0], name)), None)
        if rule is None:
            continue
        pattern, targets, transposed = rule
        info = store.info(name)
        shape = tuple(reversed(info.shape)) if transposed else tuple(info.shape)
        if not shape or shape[0] % len(targets):
            raise InputError(f"{name} {list(shape)}: its first dimension does not split into {len(targets)} chunks")
        rows = shape[0] // len(targets)
        for k, target in enumerate(targets):
            new = re.sub(pattern, target, name)
            if new not in store:
                views[new] = (
                    view_info(info, (rows, *shape[1:])),
                    lambda n=name, k=k, r=rows, t=transposed: _chunk(store, n, k, r, t),
                )
    return ViewStore(store, views) if views else store


def _chunk(store: WeightStore, name: str, k: int, rows: int, transposed: bool) -> np.ndarray:
    stored = store.read(name)
    return (stored.T if transposed else stored)[k * rows : (k + 1) * rows]


def split_names(spec: ArchSpec, name: str) -> tuple[str, str] | None:
    """The gate's and up's names of a renamed tensor `ArchSpec.stored_split` names, else None."""
    rule = next((rule for rule in spec.stored_split if re.search(rule[0], name)), None)
    return None if rule is None else (re.sub(rule[0], rule[1], name), re.sub(rule[0], rule[2], name))


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


def concatenated_views(store: WeightStore, spec: ArchSpec) -> dict[str, tuple[TensorInfo, Compute]]:
    """A view of each of the spec's stored_concatenations the checkpoint holds every part of: their rows one
    after another under the class's name (Molmo2's vocabulary, then its additional rows, as embed_tokens)."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for parts, target in spec.stored_concatenations:
        if target in store or not all(part in store for part in parts):
            continue
        infos = [store.info(part) for part in parts]
        if len({(info.shape[1:], info.dtype) for info in infos}) > 1:
            held = ", ".join(f"{part} {list(info.shape)} {info.dtype}" for part, info in zip(parts, infos, strict=True))
            raise InputError(f"{held}: their rows cannot be concatenated into {target}")
        shape = (sum(info.shape[0] for info in infos), *infos[0].shape[1:])
        views[target] = (view_info(infos[0], shape), lambda p=parts: np.concatenate([store.read(n) for n in p]))
    return views


def deinterleaved(stored: np.ndarray) -> np.ndarray:
    """Rows 0, 2, 4, ... then rows 1, 3, 5, ... along dim 1 (transformers' Interleave(dim=1) on load): a stacked
    [E, 2I, H] gate | up whose stored rows alternate gate j, up j."""
    shape = stored.shape
    return stored.reshape(shape[0], shape[1] // 2, 2, *shape[2:]).swapaxes(1, 2).reshape(shape)
