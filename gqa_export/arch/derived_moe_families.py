"""Mixtures of experts whose layers are another family's with a mechanism or two changed (issue #39
item 3), each read from its modeling code in transformers 5.24 and written as a `replace()` of the
closest spec: what differs is named by what it does, never by the family (docs/moe.md).
"""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.families import _MOE, GRANITEMOE, OLMO2
from gqa_export.arch.spec import config_keys

# GraniteMoE-Shared: GraniteMoE's multipliers and top-k-then-softmax router with a gated shared MLP
# beside the experts (shared_mlp.input_linear holds its gate | up halves, shared_intermediate_size
# wide: Granite-4.0-H's, whose graph already adds it), none where shared_intermediate_size is 0
_GRANITE_SHARED_MLP = ("shared_mlp.input_linear", "shared_mlp.output_linear")
GRANITEMOESHARED = replace(
    GRANITEMOE,
    name="granitemoeshared",
    moe=replace(GRANITEMOE.moe, names=replace(GRANITEMOE.moe.names, shared_mlp=_GRANITE_SHARED_MLP)),  # type: ignore[union-attr]
    config_keys=config_keys(shared_expert_intermediate_size="shared_intermediate_size"),
)

# FlexOlmo: OLMo-2's layers (no input norm: attention -> RMSNorm -> add, MLP -> RMSNorm -> add, q/k
# RMSNorms over all heads) with OLMoE's sparse block in place of the MLP (mlp.gate: softmax over every
# expert, the top k renormalized iff norm_topk_prob), no clip_qkv (OLMo-2's attention)
FLEX_OLMO = replace(OLMO2, name="flex_olmo", moe=_MOE)

DERIVED_MOE = (GRANITEMOESHARED, FLEX_OLMO)
