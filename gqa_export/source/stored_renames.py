"""A checkpoint's tensors under the names transformers' class gives them at load (its conversion mapping),
read under those names.

Dory's hub files (and what save_pretrained writes by default) keep the decoder under `backbone.`, the
embedding as `embeddings`, the output gate as `self_attn.g_proj`; the released checkpoints also store each
decoder layer as two: an attention block `layers.{2i}.mixer.*` (+ `attn_alpha`) and an MLP block
`layers.{2i+1}.mixer.*` (+ `mlp_alpha`), which transformers' LayerPairCollapse reads as `layers.{i}.self_attn.*`,
`layers.{i}.mlp.*`, `lambda_1`, `lambda_2`. `ArchSpec.stored_renames` lists the regex renames (applied in order,
after the pair collapse where `ArchSpec.collapsed_layer_pairs`); each tensor whose renamed name is not stored
gets a view under it, reading the stored tensor unchanged, so every layout gives the same package."""

from __future__ import annotations

import re

from gqa_export.arch.spec import ArchSpec
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


def renamed_views(store: WeightStore, spec: ArchSpec) -> WeightStore:
    """`store` with a view under its class's name of each tensor stored under another."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for name in store.names():
        new = renamed(spec, name)
        if new != name and new not in store:
            info = store.info(name)
            views[new] = (view_info(info, info.shape), lambda n=name: store.read(n))
    return ViewStore(store, views) if views else store


def renamed(spec: ArchSpec, name: str) -> str:
    """A stored tensor's name as its class reads it."""
    name = collapsed_pair(name) if spec.collapsed_layer_pairs else name
    for pattern, replacement in spec.stored_renames:
        name = re.sub(pattern, replacement, name)
    return name
