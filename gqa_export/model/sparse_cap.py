"""The longest context a package of a sparse-attention family computes exactly, and its wording.

DeepSeek-V3.2's lightning indexer keeps the top index_topk keys per query (model/latent.py), MiniMax-M3's
block-sparse indexer the top index_topk_blocks blocks of index_block_size keys (spec block_sparse_type),
Qwen4-Exp's QSA indexer the top indexer_budget / indexer_compress_ratio complete blocks of
indexer_compress_ratio keys plus the incomplete last block (spec qsa_type): within indexer_budget +
indexer_compress_ratio - 1 visible keys every block is chosen (docs/coverage.md). While a query's keys fit
in that selection the indexer keeps all of them and the layer is plain attention, which is what the
package computes; past it the indexer drops keys. So the package's context is capped there
(docs/latent-attention.md, docs/moe.md).
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


def qsa_cap(opt: Any, spec: ArchSpec, layer_types: list[str] | None) -> int:
    """indexer_budget + indexer_compress_ratio - 1 where some layer is the spec's QSA type; 0: no cap. A
    budget below it keeps fewer blocks than a query's complete ones: 2 blocks of 4 keys (budget 8) keep
    every key of 11 (two complete blocks and 3 more), not of 12 (three complete blocks)."""
    if spec.qsa_type is None or spec.qsa_type not in (layer_types or ()):
        return 0
    budget, block = int(opt("qsa_budget", 0) or 0), int(opt("qsa_block", 0) or 0)
    if budget < 1 or block < 1:
        raise InputError(
            f"{spec.qsa_type} layers need a positive indexer_budget and indexer_compress_ratio (got {budget} and "
            f"{block}): the QSA indexer's selection sets the package's context"
        )
    return budget + block - 1


def cap_wording(kind: str = "block_sparse") -> tuple[str, str]:
    """(what the cap is called, why it exists), for the build note and the --max-length refusal: MiniMax-M3's
    block-sparse cap, Qwen4-Exp's QSA cap ("qsa"), DeepSeek-V4's CSA indexer ("compressed"; model/shared_kv.py) or
    Doge's keep_window_size ("key_window"; ModelDims.cap_kind). DeepSeek-V3.2's index_topk keeps its own wording in
    plan/model_phase.py."""
    if kind == "compressed":
        return (
            "index_topk x compress_rate",
            "DeepSeek-V4's CSA indexer keeps every compressed key only within its top index_topk",
        )
    if kind == "key_window":
        return "keep_window_size", "Doge's dynamic mask keeps every key only within its top keep_window_size"
    if kind == "qsa":
        return (
            "indexer_budget + indexer_compress_ratio - 1",
            "Qwen4-Exp's QSA indexer keeps every key only while a query's complete key blocks fit in its budget",
        )
    return (
        "index_topk_blocks x index_block_size",
        "MiniMax-M3's block-sparse indexer keeps every key only within its top blocks",
    )
