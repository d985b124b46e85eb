"""A mixture of attention heads (JetMoE's MoA): the tensor names an `ArchSpec.attention_experts`
holds. Each token's router picks the top k of E query projections; every expert's queries attend
over one shared set of kv heads, and each chosen expert's output projection is weighted by its gate.
The export computes it densely (docs/coverage.md §5): the queries of all E experts as E x kv_heads
query heads ordered kv-head-major, each expert's heads scaled by its dense routing weight (zero off
the top k), then one output projection over all of them; source/expert_views.py builds those two
weights from the stored expert tensors, graph/expert_attention.py the gating."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionExpertNames:
    """Modules relative to the layer: the experts' query projections [E, kv_heads * D, H] and output
    projections [E, H, kv_heads * D] (stored as `<module>.weight`), their router Linear [E, H], the
    bias [H] added after the output projection, the fused [k | v] projection [2 kv_heads D, H], and
    the names the computed qkv [q | k | v] and output weights get (`LayerNames.qkv` / `.o`)."""

    queries: str = "self_attention.experts.input_linear"
    outputs: str = "self_attention.experts.output_linear"
    router: str = "self_attention.experts.router.layer"
    bias: str = "self_attention.experts.bias"
    kv: str = "self_attention.kv_proj"
    qkv: str = "self_attention.qkv_proj"
    o: str = "self_attention.o_proj"
