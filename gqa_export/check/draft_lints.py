"""The draft-pairing lint: a package with `model.draft` is checked for what onnxruntime-genai's
speculative decoding needs of the pair (docs/speculative.md §7).

`build --draft` refuses every one of these before writing; the lint catches a package built
elsewhere or edited afterwards (its draft block, provider entries, tokenizer or graphs).
"""

from __future__ import annotations

from gqa_export.check.findings import Finding
from gqa_export.check.reader import Package
from gqa_export.package.draft import pairing_problems

_FIXES = {
    "draft-options": "write speculative.max_draft_tokens 1..16, min_adaptive_k 0..max_draft_tokens, cooldown "
    "true/false, no ngram_size (docs/speculative.md §1)",
    "draft-ep": "rebuild with --draft so both graphs carry the same --ep provider entry",
    "draft-tokenizer": "restore the tokenizer files, or rebuild with --draft",
    "draft-vocab": "pair a draft with the target's tokenizer and vocabulary (docs/speculative.md §3)",
    "draft-rewind": "export the draft with --attention gqa or bias and full-size KV caches (docs/speculative.md §4)",
    "draft-pruned-logits": "rebuild with --draft (it keeps full logits in both graphs)",
    "draft-missing": "restore the draft graph, or rebuild with --draft",
}


def draft_findings(pkg: Package, _: int) -> list[Finding]:
    if not pkg.config or "draft" not in (pkg.config.get("model") or {}):
        return []
    return [Finding(rule, "error", message, _FIXES[rule]) for rule, message in pairing_problems(pkg.path)]
