"""Stage 3: graph clean-up and ORT fusions with onnxscript, without touching weight bytes.

- Add + SimplifiedLayerNormalization -> com.microsoft.SkipSimplifiedLayerNormalization
  (onnxscript's ORT fusion rule; ORT's CPU and CUDA kernels compute the residual sum and the
  RMSNorm in one pass). The fused node's optional outputs that nothing reads (mean and inverse
  deviation; the final norm's residual sum) are left unnamed: ORT's kernels write them only when
  named (a decode step's SkipSimplifiedLayerNormalization time halves, docs/ort-ops.md §7).
- Constant folding of small shape arithmetic (onnxscript's folder; its size limits keep it away
  from weights, so lazy tensors stay unread).
- Dead nodes, initializers, graph inputs and opsets removed (a graph input nobody reads, such as a
  `position_ids` made redundant by fused RoPE, must not be fed by the runtime).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, RemoveUnusedOpsetsPass

KEEP_INPUTS = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class OptimizeReport:
    skip_norm_fusions: int
    nodes_before: int
    nodes_after: int
    removed_inputs: tuple[str, ...]


def optimize(model: ir.Model, fuse_skip_norm: bool = True) -> OptimizeReport:
    """fuse_skip_norm: False for EPs without the Skip* contrib kernels (eps.skip_norm_fusion)."""
    from onnxscript.optimizer import fold_constants
    from onnxscript.rewriter.ort_fusions.skip_normalization import fuse_skip_rms_normalization

    before = len(model.graph)
    fold_constants(model)
    fusions = fuse_skip_rms_normalization(model) if fuse_skip_norm else 0
    omit_unread_norm_statistics(model)
    RemoveUnusedNodesPass()(model)
    removed = remove_dead_inputs(model)
    RemoveUnusedOpsetsPass()(model)
    return OptimizeReport(fusions, before, len(model.graph), removed)


def omit_unread_norm_statistics(model: ir.Model) -> int:
    """Give the fused skip norms' optional outputs the empty name where nothing reads them, so that
    ORT skips writing them: 1 and 2 (mean, inverse standard deviation: training outputs) always,
    3 (the residual sum) after the last layer. Returns how many outputs were dropped."""
    dropped = 0
    for node in model.graph:
        if node.op_type != "SkipSimplifiedLayerNormalization" or node.domain != "com.microsoft":
            continue
        for value in node.outputs[1:]:
            if value.name and not value.uses() and not value.is_graph_output():
                value.name = ""
                dropped += 1
    return dropped


def remove_dead_inputs(model: ir.Model) -> tuple[str, ...]:
    dead = [v for v in model.graph.inputs if not v.uses() and v.name not in KEEP_INPUTS and not _is_kv(v.name)]
    for value in dead:
        model.graph.inputs.remove(value)
    return tuple(v.name or "" for v in dead)


def _is_kv(name: str | None) -> bool:
    # KV inputs are bound by the runtime by name; a layer whose cache is unused still owns them.
    return bool(name) and name.startswith("past_key_values.")
