"""`genai_config.json`: only keys ORT GenAI's strict parser documents (docs/ortgenai.md §1.1).

The parser throws on any unknown key under `model`, `decoder`, `search`, so every key written
here is one of the schema's. Head/layer counts come from the graph itself (`GraphFacts`), and
`past_present_share_buffer` is true exactly when every attention node can share (GQA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.eps import EPS
from gqa_export.graph.decoder import PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE
from gqa_export.graph.recurrent_state import PAST_CONV, PAST_RECURRENT, PRESENT_CONV, PRESENT_RECURRENT
from gqa_export.model.dims import ModelDims
from gqa_export.package.graph_facts import GraphFacts

DEFAULT_MAX_LENGTH = 4096
STATIC = ("past_sequence_length", "total_sequence_length")  # the static graphs' length inputs
# generation_config.json keys carried into `search` (HF name -> genai name).
SEARCH_FROM_GENERATION = {
    "do_sample": "do_sample",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "repetition_penalty": "repetition_penalty",
}


@dataclass(frozen=True)
class Stage:
    """One graph of the package and when ORT GenAI runs it."""

    filename: str
    facts: GraphFacts
    run_on_prompt: bool = True
    run_on_token_gen: bool = True


@dataclass(frozen=True)
class ConfigOptions:
    model_type: str  # the genai routing type, e.g. "llama" or "decoder"
    ep: str
    max_length: int
    context_length: int
    cuda_graph: bool = False
    static_window: int = 0  # static shapes (QNN): the prompt window of the prefill graph
    num_heads: int = 0  # static graphs: query heads (no attention node carries them)


def make_genai_config(
    stages: list[Stage], dims: ModelDims, opts: ConfigOptions, generation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One graph: a plain decoder. Several: a `decoder-pipeline` (docs/ortgenai.md §1.5, §6.3) whose
    stages list their exact graph I/O names; share buffer only if every stage can share."""
    facts = stages[0].facts
    # onnxruntime-genai refuses an eos id outside the logits when a generator is made, whatever the prompt; such an
    # id (a published eos past a config's vocabulary, a pad id of -1 meaning none) is one no model can emit, so
    # leaving it out stops generation exactly where transformers' does. No eos id: the pad id, when it is a token
    pad = dims.pad_token_id
    eos = [i for i in dims.eos_token_ids if 0 <= i < dims.logits_width]
    eos = eos or ([pad] if pad is not None and 0 <= pad < dims.logits_width and not dims.eos_token_ids else [])
    model: dict[str, Any] = {
        "type": opts.model_type if len(stages) == 1 else "decoder-pipeline",
        "context_length": opts.context_length,
        "vocab_size": dims.logits_width,  # the logits' width (a pruned lm_head's rows)
        "eos_token_id": eos if len(eos) != 1 else eos[0],
        "pad_token_id": dims.pad_token_id if dims.pad_token_id is not None else (eos[0] if eos else 0),
        "decoder": {
            "session_options": {"log_id": "onnxruntime-genai", "provider_options": _provider_options(opts)},
            "head_size": facts.head_size,
            "hidden_size": dims.hidden_size,
            "inputs": _io_names(facts.inputs, ("input_ids", "inputs_embeds", "attention_mask", "position_ids", *STATIC))
            | {"past_key_names": PAST_KEY, "past_value_names": PAST_VALUE},
            "outputs": _io_names(facts.outputs, ("logits", "hidden_states"))
            | {"present_key_names": PRESENT_KEY, "present_value_names": PRESENT_VALUE},
            "num_attention_heads": facts.num_heads,
            "num_hidden_layers": len(facts.kv_layers),
            "num_key_value_heads": facts.num_kv_heads,
        },
    }
    decoder = model["decoder"]
    if facts.recurrent_layers:
        _add_recurrent_state(decoder, facts)
    elif facts.conv_layers:
        _add_conv_state(decoder, facts)
    if len(stages) > 1 and EPS[opts.ep].pipeline_disables_prepacking:
        # ORT repacks fp32 MatMul weights into each session's own memory; two sessions would hold
        # them twice. Unpacked, both map the one data file (PSS 670 vs 1052 MiB for a 150M model,
        # decode speed within noise: benchmarks/results/attention_modes.md).
        decoder["session_options"]["session.disable_prepacking"] = "1"
    if len(stages) == 1:
        decoder["filename"] = stages[0].filename
        windows = facts.window_cache_layers
        if windows and len(set(windows.values())) == 1:
            # The runtime gives the listed layers min(max_length, window + slack) slots (slack: 0 on
            # CUDA, 16 on CPU) and the kernel evicts; verified exact through onnxruntime-genai on CPU
            # (tests/graph/test_window_cache.py). slide_*: false keeps the QNN-style paths off.
            decoder["sliding_window"] = {
                "window_size": next(iter(windows.values())),
                "slide_key_value_cache": False,
                "slide_inputs": False,
                "layers": sorted(windows),
            }
    else:
        decoder["pipeline"] = [
            {
                stage.filename.removesuffix(".onnx"): {
                    "filename": stage.filename,
                    "inputs": list(stage.facts.inputs),
                    "outputs": list(stage.facts.outputs),
                    "run_on_prompt": stage.run_on_prompt,
                    "run_on_token_gen": stage.run_on_token_gen,
                }
                for stage in stages
            }
        ]
    if opts.static_window:
        _add_static(model, opts)
    if dims.bos_token_id is not None:
        model["bos_token_id"] = dims.bos_token_id
    search: dict[str, Any] = {
        "do_sample": False,
        "max_length": opts.max_length,
        "min_length": 0,
        "num_beams": 1,
        "num_return_sequences": 1,
        "past_present_share_buffer": all(stage.facts.share_buffer_ok for stage in stages),
        "repetition_penalty": 1.0,
        "temperature": 1.0,
        "top_k": 50,
        "top_p": 1.0,
    }
    for hf_key, key in SEARCH_FROM_GENERATION.items():
        value = (generation or {}).get(hf_key)
        if value is not None:
            search[key] = type(search[key])(value)
    return {"model": model, "search": search}


def _add_static(model: dict[str, Any], opts: ConfigOptions) -> None:
    """Static shapes (docs/eps.md §7): the windowed-input path cuts the prompt into windows padded
    at the end (alignment left) and feeds past_sequence_length; slide_key_value_cache false keeps
    the one fixed buffer (the sliding uint8 cache would move it); the graphs have no attention
    nodes to count heads from. context_length is the static buffer's length."""
    decoder = model["decoder"]
    decoder["num_attention_heads"] = decoder["num_attention_heads"] or opts.num_heads
    decoder["sliding_window"] = {
        "window_size": opts.static_window,
        "pad_value": 0,
        "alignment": "left",
        "slide_key_value_cache": False,
        "slide_inputs": True,
    }
    model["context_length"] = opts.max_length


def _add_conv_state(decoder: dict[str, Any], facts: GraphFacts) -> None:
    """Short-convolution state (docs/hybrid-state.md §1.2): the runtime takes every layer's kind from
    `layer_types` ("full_attention" gets a KV cache, "conv" a conv state), which must list all
    layers, and binds the states by the name templates."""
    kv = set(facts.kv_layers)
    decoder["num_hidden_layers"] = facts.num_layers
    decoder["layer_types"] = ["full_attention" if i in kv else "conv" for i in range(facts.num_layers)]
    decoder["inputs"]["past_conv_names"] = PAST_CONV
    decoder["outputs"]["present_conv_names"] = PRESENT_CONV
    decoder["conv_cache_size"] = facts.conv_state_size


def _add_recurrent_state(decoder: dict[str, Any], facts: GraphFacts) -> None:
    """Gated-DeltaNet and Mamba2 state (docs/hybrid-state.md §1.1, §1.2, §8.2): the runtime's RecurrentState finds
    the layers by matching the graph's inputs against `past_recurrent_names` and binds a conv and a
    recurrent state under each index. No `layer_types`: it would switch the conv KV cache on too,
    which binds the conv states a second time."""
    decoder["num_hidden_layers"] = facts.num_layers
    decoder["inputs"].update(past_conv_names=PAST_CONV, past_recurrent_names=PAST_RECURRENT)
    decoder["outputs"].update(present_conv_names=PRESENT_CONV, present_recurrent_names=PRESENT_RECURRENT)


def _io_names(graph_names: dict[str, Any], known: tuple[str, ...]) -> dict[str, str]:
    """The genai input/output keys the graph has (genai's key is the graph's name for these)."""
    return {name: name for name in known if name in graph_names}


def _provider_options(opts: ConfigOptions) -> list[dict[str, dict[str, str]]]:
    """The EP's provider options; CUDA graphs stay off unless asked for (--cuda-graph): capture
    needs batch 1 (docs/ortgenai.md §1.7, §6.1)."""
    return EPS[opts.ep].genai_provider_options(opts.cuda_graph)


def default_max_length(context_length: int) -> int:
    """A KV buffer we can afford: share-buffer pre-allocates all of max_length (docs/ortgenai.md §3.3)."""
    return min(context_length, DEFAULT_MAX_LENGTH)
