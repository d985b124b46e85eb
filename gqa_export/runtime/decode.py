"""The package's decode loops through onnxruntime-genai: every position's logits of a sequence,
and a prompt followed by decode steps.

`eval` (perplexity over windows) and `--report` (quantized vs float logits) both need the logits
that predict each position of a sequence, scored in one prompt pass; the KV-cache calibration
(runtime/kv_calibration.py) needs what the prompt wrote into the cache and the logits of decode steps that
read it back (`decode_steps`). A package built with
`--prune-lm-head` returns the last position's logits only ([B,1,V], docs/ortgenai.md §5.1), so
one pass would give one row; stepping one token at a time gives every row but costs a graph run
per position (4-5x slower on a 150M model). Instead such a package is scored through a
*full-logits view*: its graph, read without weights, with the last-token gather
(graph/outputs.py: `last_real_position`) bypassed so that the lm_head sees every position, handed
to onnxruntime-genai as in-memory model data (`Config.add_model_data`) while the weights still load
from the package's own external-data file. Every weight and every other node is the package's
own; only which rows reach the lm_head changes, and nothing is written anywhere. A pruned graph of
a form this module does not recognize (another exporter's) falls back to stepping.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.jsonio import read_json

GATHER_SCOPE = "/last_token/"  # the node-name scope of graph/outputs.py:last_real_position


def decoder_graphs(package: Path) -> list[str]:
    """The graph files genai runs for the decoder (check/reader.py's reading of genai_config)."""
    from gqa_export.check.reader import decoder_stages

    return [filename for filename, *_ in decoder_stages(read_json(package / "genai_config.json") or {})]


class PositionLogits:
    """Logits of a token sequence from one model, position by position (float32 rows)."""

    def __init__(self, model: Any, stepwise: bool, keep: dict[str, bytes] | None = None) -> None:
        self.model = model
        self.stepwise = stepwise
        self._graphs = keep  # onnxruntime-genai reads in-memory graphs from these bytes: keep them alive

    def __call__(self, ids: np.ndarray, first: int) -> np.ndarray:
        """The logits that predict positions `first..L-1` of `ids`: [L - first, V]."""
        return self.at_positions(ids[:-1], first - 1)

    def at_positions(self, ids: np.ndarray, start: int) -> np.ndarray:
        """The logits computed at positions `start..L-1` of `ids`: [L - start, V]."""
        import onnxruntime_genai as og

        ids = np.asarray(ids, dtype=np.int32).reshape(1, -1)
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=ids.shape[1])
        generator = og.Generator(self.model, params)
        if not self.stepwise:  # every position's logits from one append
            generator.append_tokens(ids)
            return np.asarray(generator.get_output("logits"), dtype=np.float32)[0][start:]
        generator.append_tokens(ids[:, : start + 1])
        rows = [np.asarray(generator.get_output("logits"), dtype=np.float32)[0]]
        for column in range(start + 1, ids.shape[1]):
            generator.append_tokens(ids[:, column : column + 1])
            rows.append(np.asarray(generator.get_output("logits"), dtype=np.float32)[0])
        return np.concatenate(rows)


def position_logits(package: Path, ep: str) -> PositionLogits:
    """A `PositionLogits` over the package, through its full-logits view when it is pruned."""
    from gqa_export.runtime.run import load

    graphs = full_logits_view(package)
    if graphs is None:
        return PositionLogits(load(package, ep), stepwise=True)
    return PositionLogits(load(package, ep, graphs), stepwise=False, keep=graphs)


def full_logits_view(package: Path) -> dict[str, bytes] | None:
    """The package's pruned decoder graphs rewritten to return every position's logits, as
    serialized bytes by file name ({} when none is pruned; None when a pruned graph has a form
    this module does not recognize)."""
    view = {}
    for name in decoder_graphs(package):
        model = _load_structure(package / name)
        if _pruned(model):
            if not _unprune(model):
                return None
            view[name] = model.SerializeToString()
    return view


def _load_structure(path: Path) -> Any:  # -> onnx.ModelProto without weights
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends: name the file
        raise InputError(f"{path} is not a readable ONNX model ({exc}); re-export the package") from None


def _pruned(model: Any) -> bool:
    logits = next((o for o in model.graph.output if o.name == "logits"), None)
    dims = logits.type.tensor_type.shape.dim if logits is not None else []
    return len(dims) == 3 and dims[1].HasField("dim_value") and dims[1].dim_value == 1


def _unprune(model: Any) -> bool:
    """Bypass the last-token gather in place: its consumers read the [B,S,H] hidden states it
    gathered from, and `logits` gets a symbolic sequence dimension. False when not found."""
    nodes = model.graph.node
    gather = [n for n in nodes if n.op_type == "GatherND" and GATHER_SCOPE in n.name]
    if len(gather) != 1:
        return False
    picked = gather[0].output[0]
    unsqueeze = [n for n in nodes if n.op_type == "Unsqueeze" and n.input[0] == picked]
    if len(unsqueeze) != 1:
        return False
    hidden, gathered = gather[0].input[0], unsqueeze[0].output[0]
    for node in nodes:
        node.input[:] = [hidden if name == gathered else name for name in node.input]
    _drop_dead_nodes(model.graph)
    logits = next(o for o in model.graph.output if o.name == "logits")
    dim = logits.type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_param = "sequence_length"
    return True


def _drop_dead_nodes(graph: Any) -> None:
    """Remove nodes none of whose outputs is read (by a node or as a graph output), repeatedly."""
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if not any(name in read for name in node.output)]
        if not dead:
            return
        for node in dead:
            graph.node.remove(node)


@dataclass
class DecodeRun:
    """A prompt and `steps` decode steps: each step's logits, the tokens fed after the prompt (the
    last one chosen but not fed), and the requested outputs right after the prompt pass."""

    logits: np.ndarray  # [steps, V] float32: the decode steps' last-position logits
    tokens: list[int]  # steps + 1
    after_prompt: dict[str, np.ndarray]


def decode_steps(
    model: Any, prompt: list[int], steps: int, forced: list[int] | None = None, capture: tuple[str, ...] = ()
) -> DecodeRun:
    """Prompt, then `steps` one-token decode steps on the runtime's own cache: greedy, or
    teacher-forced on `forced` (steps + 1 tokens). `capture` names outputs read after the prompt
    pass (a KV present is the shared max_length buffer: positions past the prompt are zeros)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + steps + 1)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray([prompt], dtype=np.int32))
    after_prompt = {name: np.asarray(generator.get_output(name)) for name in capture}
    last = np.asarray(generator.get_output("logits"), dtype=np.float32)[0, -1]
    rows, tokens = [], []
    for step in range(steps + 1):
        tokens.append(int(last.argmax()) if forced is None else forced[step])
        if step == steps:
            break
        generator.append_tokens(np.asarray([[tokens[-1]]], dtype=np.int32))
        last = np.asarray(generator.get_output("logits"), dtype=np.float32)[0, -1]
        rows.append(last)
    return DecodeRun(np.stack(rows), tokens, after_prompt)
