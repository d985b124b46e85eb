"""A layer's fused projection read as the separate Linears it concatenates on its rows.

HRM-Text's checkpoints (the layout transformers' save_pretrained writes back) store attn.gqkv_proj,
[gate | q | k | v] in four equal row blocks, which its class splits at load (Chunk on dim 0) into
self_attn.gate_proj, q_proj, k_proj and v_proj. `ArchSpec.split_projections` names the fused module and its
parts; each part gets a view of its rows under its own name, so the graph reads them as any Llama
layer's projections and the output gate as its own Linear. Molmo2's released checkpoints store
self_attn.att_proj, [q | k | v] over heads x head_dim, kv heads x head_dim twice (transformers' Split on
dim 0): `ArchSpec.stored_qkv` names it, read as the layer's q, k and v at the config's head counts."""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.dims import ModelDims
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.weights import TensorInfo, WeightStore


def split_projection_views(store: WeightStore, spec: ArchSpec, dims: ModelDims) -> WeightStore:
    """`store` with a view of each part of each stored fused projection the spec's split_projections
    and stored_qkv name."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for i in range(dims.num_layers):
        layer = spec.layer_tensor(i, "", "")
        fused_parts = [(fused, parts, None) for fused, parts in spec.split_projections]
        if spec.stored_qkv is not None:
            d, kv = dims.layers[i].head_dim, dims.layers[i].num_kv_heads
            sizes = (dims.of_layer(dims.layers[i]).num_heads * d, kv * d, kv * d)
            fused_parts.append((spec.stored_qkv, (spec.layer.q, spec.layer.k, spec.layer.v), sizes))
        for fused, parts, sizes in fused_parts:
            for suffix in ("weight", "bias"):
                name = f"{layer}{fused}.{suffix}"
                if name in store:
                    views.update(_part_views(store, name, layer, parts, suffix, sizes))
    return ViewStore(store, views) if views else store


def _part_views(
    store: WeightStore, name: str, layer: str, parts: tuple[str, ...], suffix: str, sizes: tuple[int, ...] | None
) -> dict[str, tuple[TensorInfo, Compute]]:
    """A view per part of the stored fused `name`: row blocks of `sizes`, or equal ones."""
    info = store.info(name)
    rows, extra = divmod(info.shape[0], len(parts))
    if sizes is None and extra:
        raise InputError(f"{name} has {info.shape[0]} rows, not {len(parts)} equal blocks ({', '.join(parts)})")
    sizes = sizes or (rows,) * len(parts)
    if sum(sizes) != info.shape[0]:
        raise InputError(
            f"{name} has {info.shape[0]} rows, not the {' + '.join(map(str, sizes))} of {', '.join(parts)} "
            "the config's heads and head_dim give; the config does not belong to these weights"
        )
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    start = 0
    for part, size in zip(parts, sizes, strict=True):
        views[f"{layer}{part}.{suffix}"] = (
            view_info(info, (size, *info.shape[1:])),
            lambda n=name, r=(start, start + size): store.read(n, rows=r),
        )
        start += size
    return views
