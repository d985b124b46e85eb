"""Efficiency and integration options of a build: last-token logits, pipeline inputs/outputs, CUDA graph.

Each is validated here once (one line, exit 2 for a combination that cannot work) and turned into
the graph's `GraphOptions` fields and the genai_config switches.

- Last-token logits (`--prune-lm-head`, off by default): genai 0.18 accepts [B,1,V] prompt logits
  with no config key and its Generator uses the row as it is, so the graph picks each right-padded
  row's last real token (graph/outputs.py). Off by default because genai decides "pruned" from the
  static dim 1 of `logits` and then its other APIs do not serve the package: `og.Engine` fails
  (ENGINE_EXECUTION_FAILURE), n-gram speculative decoding refuses it, a draft-model target
  verifies token by token (docs/ortgenai.md §5.1, §5.2). It saves prefill time and memory (the lm_head on
  one row) for packages served only through the Generator. Refused for decoder pipelines (split),
  whose stages the runtime chains by name, and with `--no-lm-head`.
- `--inputs-embeds` / `--no-lm-head`: genai's decoder-only state binds `input_ids` and reads
  `logits` ("Model input was not found: input_ids"), so such a package is a stage for a larger
  pipeline; no smoke run is possible and none is attempted.
- `--cuda-graph`: provider option `enable_cuda_graph: "1"`. genai captures decode steps only and
  requires the shared KV buffer (kv_cache.cpp: "Graph capture is not supported with
  past_present_share_buffer set to false") and greedy/sampling without beams; our GQA graphs
  keep every shape static in decode (one buffer of max_length), bias/split graphs do not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.request.records import IoOptions, KvQuantOptions

LOGITS_MODES = ("all", "last", "none")


@dataclass(frozen=True)
class ResolvedIo:
    logits: str  # all | last | none
    inputs_embeds: bool
    hidden_states: bool
    cuda_graph: bool
    mrope_positions: bool = False

    @property
    def runnable(self) -> bool:
        """Whether onnxruntime-genai can generate from the package on its own (smoke run)."""
        return self.not_runnable is None

    @property
    def not_runnable(self) -> str | None:
        """Why onnxruntime-genai cannot generate from the package on its own, None when it can: a
        decoder-only package cannot feed 3-D position_ids (only a multimodal one computes them)."""
        cannot = "onnxruntime-genai cannot generate on its own from a decoder that"
        if self.inputs_embeds:
            return f"{cannot} takes inputs_embeds, not input_ids (--inputs-embeds: a pipeline stage)"
        if self.logits == "none":
            return f"{cannot} gives hidden_states, not logits (--no-lm-head: a pipeline stage)"
        if self.mrope_positions:
            return f"{cannot} takes M-RoPE position_ids (only a multimodal package computes them)"
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "logits": self.logits,
            "inputs_embeds": self.inputs_embeds,
            "hidden_states": self.hidden_states,
            "cuda_graph": self.cuda_graph,
            **({"mrope_positions": True} if self.mrope_positions else {}),
        }


def resolve_io(io: IoOptions, ep: str, attention_mode: str, num_graphs: int) -> ResolvedIo:
    """The graph I/O a build gets; InputError for combinations that cannot work."""
    if io.no_lm_head and io.prune_lm_head:
        raise InputError("--no-lm-head has no lm_head to prune; drop --prune-lm-head")
    if io.no_lm_head and io.hidden_states:
        raise InputError("--no-lm-head already outputs hidden_states; drop --hidden-states")
    if io.prune_lm_head and num_graphs > 1:
        raise InputError(
            f"--prune-lm-head is for single-graph packages; --attention {attention_mode} writes a decoder pipeline"
        )
    if io.cuda_graph:
        if not EPS[ep].cuda_graph:
            able = [e.name for e in EPS.values() if e.cuda_graph]
            raise InputError(f"--cuda-graph is a CUDA provider option; export with --ep {' or '.join(able)}")
        if attention_mode != "gqa":
            raise InputError(
                f"--cuda-graph needs the GQA graph on the shared KV buffer (static decode shapes); "
                f"--attention {attention_mode} does not have it: use --attention gqa"
            )
    if io.no_lm_head:
        logits = "none"
    else:
        logits = "last" if io.prune_lm_head else "all"
    return ResolvedIo(logits, io.inputs_embeds, io.hidden_states, io.cuda_graph, io.mrope_positions)


def with_recipe_defaults(
    io: IoOptions, kv: KvQuantOptions, defaults: dict[str, Any]
) -> tuple[IoOptions, KvQuantOptions]:
    """A recipe's `build:` defaults (prune_lm_head, kv_cache, kv_scales) where the command line is silent."""
    if io.prune_lm_head is None and "prune_lm_head" in defaults:
        io = replace(io, prune_lm_head=defaults["prune_lm_head"])
    if kv.dtype is None and "kv_cache" in defaults:
        kv = replace(kv, dtype=defaults["kv_cache"], scales=defaults.get("kv_scales", kv.scales))
    return io, kv
