"""A checkpoint's tensors read as rows of others, as the spec's `row_views` say (arch/row_views.py): Inkling's
alternating w13 as gate and up, Inkling2's interleaved w13 experts put apart, ERNIE-4.5-VL's hub router transposed
and its moe_statics rows one per expert set, Step3p7's release's stacked gate and up halves joined, Molmo2's
release's two embedding tables joined.

A view matches a stored tensor by its name as the class spells it (after the spec's stored_renames where the checkpoint
has that layout: `names`, from source/stored_renames.py), is made where the checkpoint does not hold its name already
and holds every tensor it reads, and reads them at read time: each transposed first where the view says so (or where
its rename does, not both), then its rows (dim -2) selected and concatenated in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from gqa_export.arch.row_views import Rows
from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.source.expert_views import Compute, view_info
from gqa_export.source.weights import TensorInfo, WeightStore

# a stored tensor's name as its class spells it, and whether its rename reads it transposed
Renamed = Mapping[str, tuple[str, bool]]
Views = dict[str, tuple[TensorInfo, Compute]]
Selection = tuple[tuple[str, Rows], ...]  # (a stored tensor, its rows), in the view's order


def row_views(store: WeightStore, spec: ArchSpec, names: Renamed) -> tuple[Views, set[str]]:
    """The views the spec's row views make of `store`, and the stored tensors they match (read through them, never
    under their renamed names)."""
    views: Views = {}
    matched: set[str] = set()
    if not spec.row_views:
        return views, matched
    stored = {new: name for name, (new, _) in names.items()}
    for name, (new, renamed_transposed) in names.items():
        for view in spec.row_views:
            if not re.search(view.pattern, new):
                continue
            matched.add(name)
            target = new if view.name is None else re.sub(view.pattern, view.name, new)
            parts = tuple(stored.get(re.sub(view.pattern, rows.part, new)) if rows.part else name for rows in view.rows)
            if target not in store and None not in parts:
                selection = tuple(zip(parts, view.rows, strict=True))
                views[target] = _view(store, target, selection, view.transposed != renamed_transposed)  # type: ignore[arg-type]
    return views, matched


def _view(store: WeightStore, target: str, selection: Selection, transposed: bool) -> tuple[TensorInfo, Compute]:
    """The view of the selection's rows: its entry (shapes checked) and how it is read."""
    shapes = [_selected_shape(store.info(part), rows, transposed, part) for part, rows in selection]
    if len({(s[:-2], s[-1], store.info(part).dtype) for s, (part, _) in zip(shapes, selection, strict=True)}) > 1:
        held = ", ".join(f"{part} {list(store.info(part).shape)} {store.info(part).dtype}" for part, _ in selection)
        raise InputError(f"{held}: their rows cannot be concatenated into {target}")
    shape = (*shapes[0][:-2], sum(s[-2] for s in shapes), shapes[0][-1])
    return view_info(store.info(selection[0][0]), shape), lambda: _read(store, selection, transposed)


def _selected_shape(info: TensorInfo, rows: Rows, transposed: bool, name: str) -> tuple[int, ...]:
    shape = tuple(reversed(info.shape)) if transposed else tuple(info.shape)
    if len(shape) < 2 or shape[-2] % (rows.chunks * rows.step):
        raise InputError(
            f"{name} {list(shape)}: its rows do not split into {rows.chunks} blocks of every {rows.step}th row"
        )
    return (*shape[:-2], shape[-2] // (rows.chunks * rows.step), shape[-1])


def _read(store: WeightStore, selection: Selection, transposed: bool) -> np.ndarray:
    """The view's rows: each stored tensor's selected rows, in order."""
    return np.concatenate([_rows(store.read(part), rows, transposed) for part, rows in selection], axis=-2)


def _rows(stored: np.ndarray, rows: Rows, transposed: bool) -> np.ndarray:
    tensor = stored.T if transposed else stored
    size = tensor.shape[-2] // rows.chunks
    block = tensor[..., rows.chunk * size : (rows.chunk + 1) * size, :]
    return block[..., rows.start :: rows.step, :]
