"""Where a tower's tensors sit in a checkpoint: hub layouts and transformers 5.x's save_pretrained
put the same tower under different prefixes (`vision_tower.`, `model.vision_tower.`, ...)."""

from __future__ import annotations

from gqa_export.errors import InputError
from gqa_export.source.weights import WeightStore


def tensor_prefix(store: WeightStore, suffix: str) -> str:
    """The prefix of the one tensor whose name ends with `suffix`, or InputError naming it."""
    found = [name.removesuffix(suffix) for name in store.names() if name.endswith(suffix)]
    if len(found) != 1:
        raise InputError(f"expected one tensor named '*{suffix}' in the checkpoint, found {len(found)}")
    return found[0]
