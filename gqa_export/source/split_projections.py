"""A layer's fused projection read as the separate Linears it concatenates on its rows.

HRM-Text's checkpoints (the layout transformers' save_pretrained writes back) store attn.gqkv_proj,
[gate | q | k | v] in four equal row blocks, which its class splits at load (Chunk on dim 0) into
self_attn.gate_proj, q_proj, k_proj and v_proj. `ArchSpec.split_projections` names the fused module and its
parts; each part gets a view of its rows under its own name, so the graph reads them as any Llama
layer's projections and the output gate as its own Linear."""

from __future__ import annotations

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.weights import TensorInfo, WeightStore


def split_projection_views(store: WeightStore, spec: ArchSpec, num_layers: int) -> WeightStore:
    """`store` with a view of each part of each stored fused projection the spec's split_projections name."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for layer in sorted({spec.layer_tensor(i, "", "") for i in range(num_layers)}):
        for fused, parts in spec.split_projections:
            for suffix in ("weight", "bias"):
                name = f"{layer}{fused}.{suffix}"
                if name not in store:
                    continue
                info = store.info(name)
                rows, extra = divmod(info.shape[0], len(parts))
                if extra:
                    raise InputError(
                        f"{name} has {info.shape[0]} rows, not {len(parts)} equal blocks ({', '.join(parts)})"
                    )
                for k, part in enumerate(parts):
                    block = (k * rows, (k + 1) * rows)
                    views[f"{layer}{part}.{suffix}"] = (
                        view_info(info, (rows, *info.shape[1:])),
                        lambda n=name, r=block: store.read(n, rows=r),
                    )
    return ViewStore(store, views) if views else store
