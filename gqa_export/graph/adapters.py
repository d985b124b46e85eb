"""Low-rank adapters stored in the checkpoint and always applied (Zamba2's per-use adapters of its
shared blocks, docs/hybrid-state.md §8.12): y = W x + up(down(x)), as HF adds `adapter(x)` to the
Linear's output.

They stay two MatMuls beside the Linear rather than being merged into a per-use copy of W: the
shared W is then written once and read by every use (a merged copy per use would store the full
matrix again for each), and the graph computes what HF computes, W x and up(down(x)) rounded apart
and then added, where a merged (W + up down) x rounds differently."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params


def low_rank_sum(b: GraphBuilder, x: ir.Value, pairs: list[tuple[str, str]], params: Params, node: str) -> ir.Value:
    """up(down(x)) of each (down, up) weight pair ([r, in], [out, r] nn.Linear weights), concatenated
    on the last axis in order (a packed q | k | v gets its three adapters side by side)."""
    outs = []
    for j, (down, up) in enumerate(pairs):
        low = b.op("MatMul", x, b.initializer(down, params.matmul_weight([down])), name=f"{node}/adapter_{j}/down")
        outs.append(b.op("MatMul", low, b.initializer(up, params.matmul_weight([up])), name=f"{node}/adapter_{j}/up"))
    return outs[0] if len(outs) == 1 else b.op("Concat", *outs, axis=-1, name=f"{node}/adapters")
