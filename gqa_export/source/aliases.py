"""A layer's tensors under another spelling than the spec's, read as the spec names them.

One family's checkpoints spell some modules differently by who wrote them: Kimi-Linear's hub files
keep the forget gate's f_a_proj / f_b_proj / A_log / dt_bias directly under self_attn and the dense
MLP under mlp, transformers 5.x's own layout (save_original_format=False) nests the former under
self_attn.forget_gate, and its save_pretrained in the hub's format (the default) puts the dense MLP
under block_sparse_moe, beside the experts. The spec names one spelling and lists the others in
`ArchSpec.tensor_aliases`; each layer tensor found only under an alias gets a view under the spec's
name, reading the stored tensor unchanged, so the graph and its initializer names are the same
whichever spelling the checkpoint has (docs/hybrid-state.md §8.17). A layer tensor the checkpoint holds as
parts (`ArchSpec.tensor_joins`: Step3p7's release's moe.gate_proj and moe.up_proj) is read as their concatenation
along dim -2, as transformers' Concatenate(dim=1) loads the stacked [E, I, H] halves into [E, 2I, H]."""

from __future__ import annotations

import numpy as np

from gqa_export.arch.spec import ArchSpec
from gqa_export.source.expert_views import Compute, ViewStore, view_info
from gqa_export.source.weights import TensorInfo, WeightStore


def aliased_views(store: WeightStore, spec: ArchSpec, num_layers: int) -> WeightStore:
    """`store` with a view under the spec's name of each layer tensor stored only under an alias."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for layer in sorted({spec.layer_tensor(i, "", "") for i in range(num_layers)}):
        for name in store.names():
            if not name.startswith(layer):
                continue
            rest = name[len(layer) :]
            for canonical, alias in spec.tensor_aliases:
                if rest.startswith(alias):
                    wanted = f"{layer}{canonical}{rest[len(alias) :]}"
                    if wanted not in store:
                        info = store.info(name)
                        views[wanted] = (view_info(info, info.shape), lambda n=name: store.read(n))
        views.update(_joined(store, spec, layer))
    return ViewStore(store, views) if views else store


def _joined(store: WeightStore, spec: ArchSpec, layer: str) -> dict[str, tuple[TensorInfo, Compute]]:
    """A view of each of the spec's tensor_joins this layer holds only as its parts: their rows (dim -2) in order."""
    views: dict[str, tuple[TensorInfo, Compute]] = {}
    for target, parts in spec.tensor_joins:
        names = [f"{layer}{part}" for part in parts]
        if f"{layer}{target}" in store or not all(name in store for name in names):
            continue
        infos = [store.info(name) for name in names]
        shape = (*infos[0].shape[:-2], sum(info.shape[-2] for info in infos), infos[0].shape[-1])
        views[f"{layer}{target}"] = (
            view_info(infos[0], shape),
            lambda n=tuple(names): np.concatenate([store.read(name) for name in n], axis=-2),
        )
    return views
