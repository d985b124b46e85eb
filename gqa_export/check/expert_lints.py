"""Lints of mixture-of-experts nodes: MoE / QMoE settings the CPU kernels get wrong
(docs/moe.md §2, §4, §9)."""

from __future__ import annotations

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package

# id -> (when a MoE / QMoE node is broken, what goes wrong, the fix); docs/moe.md §2, §4 (onnxruntime 1.31 CPU)
_EXPERT_RULES = {
    "moe-k-exceeds-experts": (
        lambda e: e.experts is not None and e.top_k > e.experts,
        "routes more experts (k) than it has: the kernel fails at run time",
        "set k <= the number of experts",
    ),
    "moe-swiglu-layout": (
        lambda e: e.activation == "swiglu" and e.attributes.get("swiglu_fusion", 0) != 1,
        "has SwiGLU experts without swiglu_fusion=1: the CPU kernels take only interleaved gate/up rows",
        "re-export with interleaved fc1 rows and swiglu_fusion=1",
    ),
    "moe-sparse-mixer-ignored": (
        lambda e: bool(e.attributes.get("use_sparse_mixer", 0)),
        "sets use_sparse_mixer, which the CPU kernels accept and ignore: plain top-k routing",
        "compute the sparsemixer weights in the graph",
    ),
    "qmoe-renormalizes": (
        lambda e: e.op == "QMoE" and not e.normalize and not e.router_weights,
        "asks for no renormalization without router_weights: QMoE renormalizes the top-k anyway",
        "feed router_weights = Softmax(router logits) (input 14)",
    ),
}


def expert_findings(pkg: Package, _: int) -> list[Finding]:
    return [
        Finding(rule, "error", f"{g.filename}: {e.op} of layer {e.layer} {what}", fix)
        for g in pkg.graphs
        for e in g.experts
        for rule, (broken, what, fix) in _EXPERT_RULES.items()
        if broken(e)
    ]
