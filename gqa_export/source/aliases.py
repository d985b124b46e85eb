"""A layer's tensors under another spelling than the spec's, read as the spec names them.

One family's checkpoints spell some modules differently by who wrote them: Kimi-Linear's hub files
keep the forget gate's f_a_proj / f_b_proj / A_log / dt_bias directly under self_attn and the dense
MLP under mlp, transformers 5.x's own layout (save_original_format=False) nests the former under
self_attn.forget_gate, and its save_pretrained in the hub's format (the default) puts the dense MLP
under block_sparse_moe, beside the experts. The spec names one spelling and lists the others in
`ArchSpec.tensor_aliases`; each layer tensor found only under an alias gets a view under the spec's
name, reading the stored tensor unchanged, so the graph and its initializer names are the same
whichever spelling the checkpoint has (docs/hybrid-state.md §8.17). A layer tensor the checkpoint holds as
parts (Step3p7's release's moe.gate_proj and moe.up_proj) is a row view (`ArchSpec.row_views`, source/row_views.py)."""

from __future__ import annotations

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
    return ViewStore(store, views) if views else store
