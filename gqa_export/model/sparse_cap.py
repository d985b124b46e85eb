"""The longest context a package of a sparse-attention family computes exactly, and its wording.

DeepSeek-V3.2's lightning indexer keeps the top index_topk keys per query (model/latent.py), MiniMax-M3's
block-sparse indexer the top index_topk_blocks blocks of index_block_size keys (spec block_sparse_type).
While a query's keys fit in that selection the indexer keeps all of them and the layer is plain
attention, which is what the package computes; past it the indexer drops keys. So the package's context
is capped there (docs/latent-attention.md, docs/moe.md).
"""

from __future__ import annotations

from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


def block_sparse_cap(opt: Any, spec: ArchSpec, layer_types: list[str] | None) -> int:
    """index_topk_blocks * index_block_size where some layer is the spec's block-sparse type; 0: no cap."""
    if spec.block_sparse_type is None or spec.block_sparse_type not in (layer_types or ()):
        return 0
    blocks, size = int(opt("index_topk_blocks", 0) or 0), int(opt("index_block_size", 0) or 0)
    if blocks < 1 or size < 1:
        raise InputError(f"index_topk_blocks {blocks} and index_block_size {size} must be positive")
    return blocks * size


def cap_wording(key_window: bool = False, compressed: bool = False) -> tuple[str, str]:
    """(what the cap is called, why it exists), for the build note and the --max-length refusal: MiniMax-M3's
    block-sparse cap, Doge's keep_window_size (`key_window`; ModelDims.key_window) or DeepSeek-V4's CSA indexer
    (`compressed`; model/shared_kv.py). DeepSeek-V3.2's index_topk keeps its own wording in plan/model_phase.py."""
    if compressed:
        return (
            "index_topk x compress_rate",
            "DeepSeek-V4's CSA indexer keeps every compressed key only within its top index_topk",
        )
    if key_window:
        return "keep_window_size", "Doge's dynamic mask keeps every key only within its top keep_window_size"
    return (
        "index_topk_blocks x index_block_size",
        "MiniMax-M3's block-sparse indexer keeps every key only within its top blocks",
    )
