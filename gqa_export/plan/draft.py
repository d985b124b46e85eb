"""`build --draft` resolved before either model is exported (docs/speculative.md §4): the draft's
own request, and what the two plans say about the pairing: a plan onnxruntime-genai cannot rewind,
and a draft whose ids differ from the target's. The runner (speculative.py) checks the written
packages again as a safety net (package/draft.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gqa_export.arch.mixer_spec import MIXER_KINDS
from gqa_export.package.draft import tokenizer_parts
from gqa_export.package.pad_id import choose_pad_id
from gqa_export.plan.records import BuildPlan
from gqa_export.request.records import BuildOptions, SpeculativeOptions

# layers with recurrent/conv state: every mixer kind but attention (and a layer without a mixer)
STATE_MIXERS = frozenset(MIXER_KINDS) - {"attention", "none"}


def draft_request(request: BuildOptions, output: Path) -> BuildOptions:
    """The draft's request: a text decoder with the target's EP and precision policy and full
    logits; the target's per-layer quantization patterns name its own layers, its recipe and
    settings are its own; an explicit --attention reaches the draft too, so a recipe that picks
    split (Gemma-3's image-token runs) can pair as single graphs (docs/speculative.md §4.1)."""
    return replace(
        request, model=str(request.draft), output=output, revision=None, smoke=False, report=False,
        io=replace(request.io, prune_lm_head=False), recipe=None, settings=(), bidirectional_ids=None,
        text_only=True, quant=replace(request.quant, keep_float=(), mixed_precision=()), draft=None,
        speculative=SpeculativeOptions(),
    )  # fmt: skip


def target_request(request: BuildOptions, output: Path) -> BuildOptions:
    """The target's own export inside the pairing's staging folder: full logits, no smoke run (the
    pair is smoke-run together), no draft of its own."""
    return replace(
        request,
        output=output,
        overwrite=False,
        smoke=False,
        io=replace(request.io, prune_lm_head=False),
        draft=None,
        speculative=SpeculativeOptions(),
    )


def rewind_refusal(plan: BuildPlan, role: str) -> str | None:
    """Why onnxruntime-genai could not verify drafted tokens with this plan's package (None: it
    can): a decoder pipeline, a multimodal package, recurrent/conv state, window-sized KV caches or
    last-token logits cannot be rewound or verified at once (package/draft.rewind_refusal reads
    the same from a written package)."""
    if len(plan.attention.graphs) > 1:  # asked for, or the recipe's auto choice (bidirectional image-token runs)
        return (
            f"the {role} is a decoder pipeline (--attention split, or its recipe's auto choice), which cannot be "
            "rewound; pass --attention gqa to build --draft (target and draft both take it)"
        )
    if plan.multimodal is not None:
        return f"the {role} is a full multimodal package; export it with --text-only"
    if any(layer.mixer in STATE_MIXERS for layer in plan.dims.layers):
        return f"the {role} carries recurrent/convolution state, which onnxruntime-genai cannot rewind"
    if any(graph.sliding_window_cache for graph in plan.graphs):
        return (
            f"the {role} keeps window-sized (sliding) KV caches, which cannot be rewound; "
            "drop attention.sliding_window_cache"
        )
    if plan.io.logits == "last":
        return f"the {role} has last-token logits (--prune-lm-head); build with --no-prune-lm-head"
    return None


def ids_mismatch(target: BuildPlan, draft: BuildPlan) -> str | None:
    """How the draft's ids differ from the target's: vocabulary size, bos/eos, the pad id the
    package would take, the tokenizer's id-defining parts (None: they agree)."""
    t, d = target.dims, draft.dims
    pads = [choose_pad_id(p.dims, p.source.model_dir, lambda row: True).id for p in (target, draft)]
    for key, mine, theirs in (
        ("vocab_size", d.vocab_size, t.vocab_size),
        ("bos_token_id", d.bos_token_id, t.bos_token_id),
        ("eos_token_id", d.eos_token_ids, t.eos_token_ids),
        ("pad_token_id", pads[1], pads[0]),
    ):
        if mine != theirs:
            return f"{key} {mine} differs from the target's {theirs}"
    t_tok, d_tok = tokenizer_parts(target.source.model_dir), tokenizer_parts(draft.source.model_dir)
    if t_tok != d_tok:
        part = next((p for p in t_tok if t_tok.get(p) != d_tok.get(p)), "tokenizer files")
        return f"its tokenizer ({part}) maps text to other token ids than the target's"
    return None
