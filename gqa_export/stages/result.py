"""What a build returns and prints (`build --json`, a release's variant record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gqa_export.graph.optimize import OptimizeReport
from gqa_export.runtime.run import GenerationResult
from gqa_export.source.fetch import Source
from gqa_export.stages.finish import smoke_json


@dataclass(frozen=True)
class BuildResult:
    output: Path
    source: Source
    recipe: str
    attention_mode: str
    ep: str
    precision: str
    max_length: int
    files: dict[str, int]
    optimize: OptimizeReport
    seconds: float
    smoke: GenerationResult | None = None
    notes: list[str] = field(default_factory=list)
    # the manifest's options.kv_cache (dtype, scales, calibration, drift) for a quantized KV cache
    kv_cache: dict[str, Any] | None = None
    report: dict[str, Any] | None = None  # quant_report.json (--report), logits_vs_float included

    @property
    def kv_cache_json(self) -> dict[str, Any]:
        """Always an object, so a consumer reads `kv_cache.dtype` whatever the build: a float cache
        has no drift (null); a quantized one carries the manifest's entry, drift numbers included."""
        return self.kv_cache if self.kv_cache is not None else {"dtype": "float", "drift": None}

    def as_json(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "source": self.source.source_id,
            "revision": self.source.revision,
            "recipe": self.recipe,
            "attention": self.attention_mode,
            "ep": self.ep,
            "precision": self.precision,
            "max_length": self.max_length,
            "kv_cache": self.kv_cache_json,
            "files": self.files,
            "total_bytes": sum(self.files.values()),
            "seconds": round(self.seconds, 3),
            "smoke": smoke_json(self.smoke),
            "notes": self.notes,
            "report": self.report,
        }
