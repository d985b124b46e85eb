"""The two plans a build request resolves into before any work (docs/architecture.md §7).

`RequestPlan` (phase 1) is what the options alone decide, before anything is fetched: the EP's
record, the precision plan when --precision is given, the user's recipe, the checks of every
option pair. `BuildPlan` (phase 2) is what the checkpoint's config and tensor index decide, before
any weight is read: the recipe, the dimensions, the attention plan and each graph's options, the
graph I/O, the KV cache, the multimodal package. The runners (pipeline.py, speculative.py,
requantize.py, release/) export from a BuildPlan and refuse nothing of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.eps import ExecutionProvider
from gqa_export.graph.io_options import ResolvedIo
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.plan import AttentionPlan
from gqa_export.model.dims import ModelDims
from gqa_export.package.multimodal import MultimodalPlan
from gqa_export.quant.quantize import PrecisionPlan
from gqa_export.recipes import Recipe
from gqa_export.request.records import BuildOptions, KvQuantOptions
from gqa_export.source.fetch import Source
from gqa_export.source.weights import WeightStore


@dataclass(frozen=True)
class RequestPlan:
    """Phase 1: a request checked against itself, the EP table and the user's recipe."""

    request: BuildOptions
    ep: ExecutionProvider
    precision: PrecisionPlan | None  # None: the recipe's default for the EP (phase 2)
    user_recipe: Recipe | None  # --recipe with --set applied


@dataclass(frozen=True)
class BuildPlan:
    """Phase 2: everything one export is built from, resolved against the checkpoint's config and
    tensor index (no weight read yet)."""

    request: BuildOptions
    ep: ExecutionProvider
    source: Source
    recipe: Recipe  # the matched or given recipe, --set and the EP's overrides applied
    precision: PrecisionPlan
    dims: ModelDims
    spec: ArchSpec  # bound to the checkpoint's tensor names
    store: WeightStore  # the tensor index the graphs stream from (an ImportedStore for pre-quantized)
    hf_config: Any
    text_config: Any
    generation: dict[str, Any] | None
    imported: dict[str, Any] | None  # the pre-quantized config read as stored (docs/prequantized.md)
    max_length: int
    attention: AttentionPlan
    io: ResolvedIo
    kv: KvQuantOptions
    graphs: tuple[GraphOptions, ...]  # one per attention.graphs entry
    multimodal: MultimodalPlan | None
    vision_weights: PrecisionPlan | None  # --encoder-precision int8: the vision linears' plan
    notes: tuple[str, ...]  # what the build says about options that had no effect

    @property
    def outer(self) -> Any:
        """A multimodal checkpoint's outer config (None for a text checkpoint)."""
        return self.hf_config if self.text_config is not self.hf_config else None

    @property
    def static_window(self) -> int:
        return self.ep.static_window
