"""The speculative statistics `gqa-export run --json` reports (docs/speculative.md §6), read from
onnxruntime-genai's generator after a run (runtime/run.py's generation loop)."""

from __future__ import annotations

from typing import Any

# get_speculative_stats() keys reported by `run --json` (docs/speculative.md §6)
ACCEPTANCE_KEYS = (
    "rounds",
    "draft_tokens_proposed",
    "draft_tokens_evaluated",
    "draft_tokens_accepted",
    "acceptance_rate",
    "bonus_tokens",
    "correction_tokens",
    "target_forward_passes",
    "draft_forward_passes",
    "effective_k",
    "mean_emitted_tokens_per_round",
    "standard_fallback_steps",
    "ngram_lookup_hits",
    "ngram_lookup_misses",
)


def acceptance(generator: Any) -> dict[str, Any]:
    """The generator's speculative statistics ({} where it drafted nothing: a plain run)."""
    stats = generator.get_speculative_stats() if hasattr(generator, "get_speculative_stats") else {}
    if not stats or not (stats.get("rounds") or stats.get("standard_fallback_steps")):
        return {}
    return {key: round(v, 4) if isinstance(v := stats.get(key), float) else v for key in ACCEPTANCE_KEYS}
