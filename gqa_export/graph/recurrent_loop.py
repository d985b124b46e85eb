"""The middle layers run n_recurrent_loops times with shared weights, unrolled (ArchSpec.recurrent_loop,
Dory; docs/coverage.md §16; model/recurrent_loop.py has the schedule).

transformers' DoryModel runs the input layers, keeps h_in = l2(h), then before each pass through the
recurrent layers resets the stream to l2(h) + h_in, and runs the output layers after the last pass. The
graph unrolls the passes into graph layers of their own (their own KV caches, named in HF's cache order; in
the last_loop mode the earlier passes read the last pass's cache without writing it, graph/decoder.py);
every pass reads the stored layers' initializers (GraphBuilder.reusing_initializers): written once."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.blocks import normalize
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims


class LoopStream:
    """The input section's normed output, added to the stream before each pass."""

    def __init__(self, b: GraphBuilder, dims: ModelDims, params: Params) -> None:
        assert dims.recurrent_loop is not None
        self.b, self.dims, self.params = b, dims, params
        self.loop = dims.recurrent_loop
        self.inputs: ir.Value | None = None

    def enter(self, i: int, h: ir.Value) -> ir.Value:
        """Graph layer i's input: at a pass's first layer, l2(h) + l2(h_in)."""
        if self.loop.pass_start(i) is None:
            return h
        # the model's final norm (weightless: no tensor name is read), as DoryModel applies self.norm
        normed = normalize(self.b, h, "", self.params, self.dims, "loop_norm", self.dims.hidden_size)
        if self.inputs is None:  # pass 0: the input section's output is h_in itself
            self.inputs = normed
        return self.b.op("Add", normed, self.inputs, name="loop_input")


def loop_stream(b: GraphBuilder, dims: ModelDims, params: Params) -> LoopStream | None:
    """The loop's stream where the family runs its middle layers in a loop, else None."""
    return LoopStream(b, dims, params) if dims.recurrent_loop is not None else None
