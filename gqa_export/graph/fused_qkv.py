"""Fused query_key_value weights in the row orders the classic decoders store (arch.spec.QKV_LAYOUTS).

`graph/blocks.linear` takes the rows of the stored weight (and bias) in q | k | v order as it writes
the initializer (`Params.matmul_rows`, streamed, never reordered in memory), so everything after the
projection is the stacked layout every other family has: one MatMul, one split, GQA's packed input.
"grouped" with as many kv heads as heads is GPT-NeoX's and Bloom's head-by-head q | k | v.
"""

from __future__ import annotations

from gqa_export.errors import InputError
from gqa_export.graph.params import Params

Runs = list[tuple[int, int]]
QKV_BLOCKS = 4  # CodeGen's model-parallel blocks (its attention's hard-coded mp_num)


def qkv_runs(layout: str, heads: int, kv_heads: int, head_dim: int) -> tuple[Runs, Runs, Runs]:
    """The stored rows of q, k and v ([start, stop) runs, in head order) for a fused weight."""
    d = head_dim
    if layout == "grouped":  # per kv head: its r query heads, its key, its value
        r = heads // kv_heads
        size = (r + 2) * d
        return (
            [(g * size, g * size + r * d) for g in range(kv_heads)],
            [(g * size + r * d, g * size + (r + 1) * d) for g in range(kv_heads)],
            [(g * size + (r + 1) * d, (g + 1) * size) for g in range(kv_heads)],
        )
    # each block: q | v | k over a quarter of the channels (transformers 5.x splits by width, so a head may
    # straddle two blocks: 5 heads of 16 are 4 blocks of 20; 4.x required whole heads per block)
    if layout == "blocks_qvk":
        if heads * d % QKV_BLOCKS:
            raise InputError(
                f"{heads} heads of {d} ({heads * d} channels) do not split into the fused projection's "
                f"{QKV_BLOCKS} equal blocks"
            )
        local = heads * d // QKV_BLOCKS
        blocks = range(QKV_BLOCKS)
        return (
            [(m * 3 * local, m * 3 * local + local) for m in blocks],
            [(m * 3 * local + 2 * local, (m + 1) * 3 * local) for m in blocks],
            [(m * 3 * local + local, m * 3 * local + 2 * local) for m in blocks],
        )
    raise InputError(f"unknown fused qkv layout '{layout}'")


def _merged(runs: Runs) -> Runs:
    """Adjacent runs joined (a multi-query weight's q heads are one run)."""
    out: Runs = []
    for start, stop in runs:
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], stop)
        else:
            out.append((start, stop))
    return out


def selected_rows(params: Params, name: str, layout: str, shape: tuple[int, int, int]) -> Runs:
    """The stored rows of the fused weight `name` ([out, in]) in q | k | v order, for `linear` to
    take as the weight (and its bias) streams; shape is (heads, kv heads, head_dim)."""
    heads, kv_heads, head_dim = shape
    q, k, v = qkv_runs(layout, heads, kv_heads, head_dim)
    runs = _merged(q + k + v)
    width = sum(stop - start for start, stop in runs)
    stored = params.store.info(name).shape[0]
    if stored != width:
        raise InputError(
            f"{name} has {stored} rows but {heads} heads and {kv_heads} kv heads of {head_dim} give {width}; "
            "the config does not belong to these weights"
        )
    return runs
