"""Which graphs an attention mode exports, and how ORT GenAI runs them.

- gqa: one graph, GroupQueryAttention, share buffer on.
- bias: one graph, standard Attention-24 with an additive bias on the same shared buffer:
  TensorScatter writes the step's K/V in place at each row's write index, the op reads the
  buffer's first T slots (graph kind "scatter"; docs/split-pipeline.md §3: onnxruntime-genai
  drives it as a plain decoder). `attention.bias_cache: growing` keeps the old form (graph kind
  "concat": past + new concatenated, share buffer off) for beam search, where onnxruntime-genai
  turns the shared buffer off (num_beams > 1) and hands graphs a growing past.
- split: a decoder-pipeline of `prefill.onnx` (the scatter graph) for prompts and `decode.onnx`
  (the gqa graph) for generated tokens, on one shared KV buffer (docs/split-pipeline.md §1, §3). ORT GenAI
  picks the stage by `next_tokens.size() > 1`: a one-token prompt runs decode, and every step of a
  batch > 1 runs prefill, so both graphs are complete and exact for any length.

`auto` is gqa unless the prompt can hold bidirectional blocks (GQA cannot express them without
a bias): then split on every EP. Measured on CPU (benchmarks/results/attention_modes.md, 150M,
decode tok/s at 1024 / 4096 + 256 with bidirectional ids): split 43.7 / 32.3, bias 38.2 / 26.9,
GQA + attention_bias 40.0 / 27.6, same PSS; without ids gqa prefills fastest at half the PSS of
the standard-Attention graphs. On CUDA by kernel routing: split's decode is the GQA graph, and
any bias keeps ONNX Attention and GQA off their flash kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import BidirectionalRuns
from gqa_export.errors import InputError


@dataclass(frozen=True)
class GraphSpec:
    filename: str
    mode: str  # the graph kind, a key of graph.decoder.OPSETS: gqa | scatter | concat; or static
    run_on_prompt: bool = True
    run_on_token_gen: bool = True
    step: int = 0  # a static graph's tokens per run (0: dynamic shapes)


@dataclass(frozen=True)
class AttentionPlan:
    mode: str  # gqa | bias | split
    bidirectional_ids: tuple[int, ...]
    graphs: tuple[GraphSpec, ...]
    weights_file: str
    reason: str


def bidirectional_ids(
    runs: BidirectionalRuns | None, recipe_ids: tuple[int, ...], hf_config: Any, requested: tuple[int, ...] | None
) -> tuple[int, ...]:
    """CLI ids win; else the recipe's list; else the ids under the family's config keys (e.g. a
    multimodal checkpoint's image_token_id), when the family's condition holds.

    A config without those keys (the text-only class of the same family) gets none."""
    if requested is not None:
        return tuple(requested)
    if recipe_ids:
        return recipe_ids
    if runs is None:
        return ()
    if runs.condition:
        key, _, want = runs.condition.partition("=")
        if str(getattr(_text_or_self(hf_config), key, None) or getattr(hf_config, key, None)) != want:
            return ()
    ids: list[int] = []
    for key in runs.token_id_keys:
        value = getattr(hf_config, key, None)
        if value is not None:
            ids.extend(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return tuple(dict.fromkeys(ids))


def _text_or_self(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get else config


def plan_attention(
    requested: str,
    ids: tuple[int, ...],
    ids_requested: bool = True,
    gqa_refusal: str | None = None,
    bias_op: str = "attention",
    bias_cache: str = "shared",
) -> AttentionPlan:
    """ids_requested: the ids were asked for (CLI or the recipe's own list), not defaults taken
    from a multimodal config; asking for gqa then drops those defaults (text-only use) instead of
    failing. bias_op / bias_cache (the recipe's attention policy) pick mode bias's graph kind."""
    mode, reason = requested, f"attention {requested} requested"
    if requested == "gqa" and ids and not ids_requested:
        reason = (
            f"attention gqa requested: image-token runs {list(ids)} attend causally (text-only use); "
            "use --attention auto, split or bias for HF's bidirectional image runs"
        )
        ids = ()
    if requested == "auto" and gqa_refusal is not None:
        mode, reason = "bias", f"GroupQueryAttention cannot run this model ({gqa_refusal.split(';')[0]}): bias"
    elif requested == "auto":
        mode = "split" if ids else "gqa"
        reason = "bidirectional token ids set: split (bias-free GQA decode)" if ids else "no bidirectional ids: gqa"
    if mode == "gqa" and ids:
        raise InputError(
            "attention gqa cannot express bidirectional token blocks; use --attention split (or bias, or auto)"
        )
    if mode == "gqa":
        graphs = (GraphSpec("model.onnx", "gqa"),)
    elif mode == "bias":
        kind = "gqa_bias" if bias_op == "gqa" else "scatter" if bias_cache == "shared" else "concat"
        graphs = (GraphSpec("model.onnx", kind),)
    else:
        graphs = (
            GraphSpec("decode.onnx", "gqa", run_on_prompt=False, run_on_token_gen=True),
            GraphSpec("prefill.onnx", "scatter", run_on_prompt=True, run_on_token_gen=False),
        )
    weights = "model.onnx.data" if len(graphs) == 1 else "weights.onnx.data"
    return AttentionPlan(mode, tuple(ids), graphs, weights, reason)


def static_plan(window: int, ids: tuple[int, ...]) -> AttentionPlan:
    """Static shapes (QNN, docs/eps.md §7): `prefill.onnx` runs each window of `window` prompt tokens,
    `decode.onnx` each generated token, one fixed KV buffer shared by both."""
    graphs = (
        GraphSpec("prefill.onnx", "static", run_on_prompt=True, run_on_token_gen=False, step=window),
        GraphSpec("decode.onnx", "static", run_on_prompt=False, run_on_token_gen=True, step=1),
    )
    reason = f"static shapes: {window}-token prefill windows and a 1-token decode graph"
    return AttentionPlan("static", tuple(ids), graphs, "weights.onnx.data", reason)


def static_max_length(requested: int | None, planned: int, window: int) -> int:
    """A static KV buffer holds whole prompt windows: the runtime pads a prompt at its end to a
    multiple of the window, and every padded slot must exist (docs/eps.md §7.1)."""
    if requested is not None and requested % window:
        raise InputError(
            f"--max-length must be a multiple of the {window}-token window for static shapes, got {requested}"
        )
    length = planned - planned % window
    if length < window:
        raise InputError(f"a static-shape package needs a context of at least one {window}-token window, not {planned}")
    return length
