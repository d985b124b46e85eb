"""Row views: tensors a class reads that a checkpoint stores as rows of other tensors (`ArchSpec.row_views`, read by
source/row_views.py), the one mechanism for what transformers' conversion mapping does on load with Chunk,
Interleave, Concatenate and Transpose.

A `RowView` names the view (a regex on a stored tensor's name as its class spells it, after `ArchSpec.stored_renames`
where the checkpoint has that layout, and the replacement giving the view's name) and its rows (dim -2, each
expert's rows in a stacked [E, R, H]): for each `Rows`, in order, one stored tensor (the matched one, or the
replacement of the match naming another), transposed first where the view says so, cut into `chunks` equal contiguous
blocks, block `chunk`, then every `step`-th row of it from `start`; the selections concatenated. The families' uses:
- Inkling's w13 (gate j, up j alternating): two views, the even rows and the odd (`alternating`);
- Inkling2's w13 experts (the same [E, 2I, H]): one view, the even rows then the odd, under the renamed name
  (`deinterleaved`, transformers' Interleave(dim=1));
- ERNIE-4.5-VL's hub moe_statics [2, E]: one view per row, its routers [H, E] read transposed (`chunked`);
- Step3p7's release moe.gate_proj and moe.up_proj [E, I, H]: one view of both, in order (`joined`); Molmo2's release
  wte.embedding and wte.new_embedding (the additional vocabulary's rows) as its embedding, the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rows:
    """Rows of one stored tensor: `part` the replacement of the view's match naming it ("": the matched tensor), its
    block `chunk` of `chunks` equal contiguous ones, then every `step`-th row of that block from `start`."""

    part: str = ""
    chunk: int = 0
    chunks: int = 1
    start: int = 0
    step: int = 1


@dataclass(frozen=True)
class RowView:
    """A view named `name` (the replacement of `pattern`'s match; None: the matched name itself, the view standing in
    for that tensor) of the `rows` concatenated in order, each stored tensor `transposed` first where it says so."""

    pattern: str
    name: str | None
    rows: tuple[Rows, ...] = (Rows(),)
    transposed: bool = False


def alternating(pattern: str, *names: str) -> tuple[RowView, ...]:
    """One view per name: the matched tensor's rows i, i + n, i + 2n, ... for the i-th of n names."""
    return tuple(RowView(pattern, name, (Rows(start=i, step=len(names)),)) for i, name in enumerate(names))


def deinterleaved(pattern: str) -> RowView:
    """The matched tensor under its own name, its even rows then its odd ones (two halves stored alternating)."""
    return RowView(pattern, None, (Rows(step=2), Rows(start=1, step=2)))


def chunked(pattern: str, *names: str, transposed: bool = False) -> tuple[RowView, ...]:
    """One view per name: the k-th of the matched tensor's len(names) equal contiguous row blocks (transposed first)."""
    n = len(names)
    return tuple(RowView(pattern, name, (Rows(chunk=k, chunks=n),), transposed) for k, name in enumerate(names))


def joined(pattern: str, name: str, *others: str) -> RowView:
    """The matched tensor's rows, then those of each of `others` (replacements of the match), as one tensor."""
    return RowView(pattern, name, (Rows(), *(Rows(part=other) for other in others)))
