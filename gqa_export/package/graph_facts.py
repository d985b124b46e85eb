"""Facts read back from a built graph, so configs describe the graph that exists, not intentions.

ORT GenAI sizes the KV cache from `decoder.num_key_value_heads`/`head_size` and discovers layers
from input names (docs/ortgenai.md §3.2); `past_present_share_buffer` is only safe when every
attention op can take a max_length past buffer: GroupQueryAttention, or a graph that writes each
past buffer in place with TensorScatter and returns it as the present (docs/split-pipeline.md §2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import onnx_ir as ir

ATTENTION_OPS = ("GroupQueryAttention", "Attention", "MultiHeadAttention", "PagedAttention", "SparseAttention")
SHARE_CAPABLE = ("GroupQueryAttention", "PagedAttention")
_PAST_KEY = re.compile(r"^past_key_values\.(\d+)\.key$")
_PAST_CONV = re.compile(r"^past\.(\d+)\.conv$")
_PAST_RECURRENT = re.compile(r"^past\.(\d+)\.recurrent$")


@dataclass(frozen=True)
class AttentionNode:
    name: str
    op_type: str
    attributes: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class GraphFacts:
    inputs: dict[str, tuple[str, tuple[int | str | None, ...]]]  # name -> (dtype, shape)
    outputs: dict[str, tuple[str, tuple[int | str | None, ...]]]
    kv_layers: tuple[int, ...]
    num_kv_heads: int
    head_size: int
    num_heads: int
    attention: tuple[AttentionNode, ...]
    kv_scattered: bool = False  # every past input is written in place by TensorScatter into a present
    conv_layers: tuple[int, ...] = ()  # layers carrying convolution state (inputs past.N.conv)
    # layers with a recurrent state too (past.N.recurrent: gated DeltaNet, Mamba2's SSM state)
    recurrent_layers: tuple[int, ...] = ()

    @property
    def num_layers(self) -> int:
        """Layers the runtime must know about: every KV and every conv-state layer."""
        return max((*self.kv_layers, *self.conv_layers), default=-1) + 1

    @property
    def conv_state_size(self) -> int:
        """The conv state's length (the kernel less one). past.N.conv is [B, K - 1, C] (channels-last)
        or [B, C, K - 1] (LFM2's channels-first short conv): the shorter static axis, since a
        kernel is a few taps and a conv spans at least a head's channels."""
        if not self.conv_layers:
            return 0
        static = [d for d in self.inputs[f"past.{self.conv_layers[0]}.conv"][1][1:] if isinstance(d, int)]
        return min(static, default=0)

    @property
    def window_cache_layers(self) -> dict[int, int]:
        """layer -> window of the GQA nodes with sliding_window_cache=1 (window-sized KV buffers)."""
        out = {}
        for a in self.attention:
            if a.op_type == "GroupQueryAttention" and a.attributes.get("sliding_window_cache") == 1:
                layer = _layer_of(a.name)
                if layer is not None:
                    out[layer] = int(a.attributes.get("local_window_size", -1))
        return out

    @property
    def share_buffer_ok(self) -> bool:
        if self.kv_scattered:
            return True
        if not self.attention and not self.kv_layers and self.recurrent_layers:
            # state only (Mamba, Mamba2): the RecurrentState updates each state in place, which the
            # mixers allow as the hybrids' do (docs/hybrid-state.md §1.3, §8.10)
            return True
        return bool(self.attention) and all(a.op_type in SHARE_CAPABLE for a in self.attention)


def graph_facts(model: ir.Model) -> GraphFacts:
    g = model.graph
    inputs = {v.name or "": _sig(v) for v in g.inputs}
    outputs = {v.name or "": _sig(v) for v in g.outputs}
    layers = sorted(int(m.group(1)) for name in inputs if (m := _PAST_KEY.match(name)))
    kv_heads = head_size = 0
    if layers:
        shape = inputs[f"past_key_values.{layers[0]}.key"][1]
        # other exporters name these dims symbolically: 0 = not stated by the graph
        kv_heads, head_size = (d if isinstance(d, int) else 0 for d in (shape[1], shape[3]))
    attention = tuple(
        AttentionNode(n.name or "", n.op_type, {k: a.value for k, a in n.attributes.items()})
        for n in ir.traversal.RecursiveGraphIterator(g)
        if n.op_type in ATTENTION_OPS
    )
    num_heads = int(attention[0].attributes.get("num_heads", 0)) if attention else 0
    outputs_set = set(g.outputs)
    pasts = [v for v in g.inputs if (v.name or "").startswith("past_key_values.")]
    scattered = bool(pasts) and all(
        any(
            use.node.op_type in ("TensorScatter", "ScatterND") and use.idx == 0 and use.node.outputs[0] in outputs_set
            for use in v.uses()
        )
        for v in pasts
    )
    conv = tuple(sorted(int(m.group(1)) for name in inputs if (m := _PAST_CONV.match(name))))
    recurrent = tuple(sorted(int(m.group(1)) for name in inputs if (m := _PAST_RECURRENT.match(name))))
    return GraphFacts(
        inputs, outputs, tuple(layers), kv_heads, head_size, num_heads, attention, scattered, conv, recurrent
    )


def _sig(value: ir.Value) -> tuple[str, tuple[int | str | None, ...]]:
    dtype = value.dtype.name if value.dtype is not None else "?"
    shape = tuple(d if isinstance(d, int) else getattr(d, "value", None) for d in (value.shape or ()))
    return dtype, shape


_LAYER_NAME = re.compile(r"layers\.(\d+)")


def _layer_of(node_name: str) -> int | None:
    m = _LAYER_NAME.search(node_name)
    return int(m.group(1)) if m else None
