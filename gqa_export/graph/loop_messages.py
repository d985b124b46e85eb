"""Messages between the passes of a loop over block-residual layers (Inkling2-Loop; docs/coverage.md, its section at the
end; ArchSpec.recurrent_loop with BlockResidualNames.messages).

transformers' Inkling2LoopTextModel runs its loop layers loop_num_passes times, each pass from the same input (the
stream and the block stack as the layers before the loop left them) and with its own caches (the unrolled schedule of
model/recurrent_loop.py, graph/recurrent_loop.py). Each pass after the first reads the previous one: its block states
past the first (the one that pass appended at its first layer is the loop's input itself) plus its output are
attended by learned queries, four per loop layer (graph/block_residuals.block_attention), giving that layer's query,
key, value and MLP messages; each joins its input through a low-rank tanh gate (graph/message_gates.py). The messages
depend on the pass only, so the graph computes all of a pass's at once."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.block_residuals import block_attention
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims


class LoopMessages:
    """The loop's input (stream and blocks) kept at its first pass, each later pass's messages made at its start."""

    def __init__(self, b: GraphBuilder, dims: ModelDims, params: Params, query: str) -> None:
        assert dims.recurrent_loop is not None
        self.b, self.dims, self.params, self.query = b, dims, params, query
        self.loop = dims.recurrent_loop
        self.start: tuple[ir.Value, list[ir.Value]] | None = None
        self.messages: list[ir.Value] = []

    def enter(self, i: int, h: ir.Value, blocks: list[ir.Value]) -> tuple[ir.Value, list[ir.Value] | None]:
        """Graph layer i's input and its four messages (None in the first pass and outside the loop); at a later
        pass's first layer the previous pass's messages are made and the stream and `blocks` reset to the loop's
        input."""
        passes = i - self.loop.inputs
        if not 0 <= passes < self.loop.loops * self.loop.recurrent:
            return h, None
        if self.loop.pass_start(i) == 0:
            self.start = (h, list(blocks))
        elif self.loop.pass_start(i) is not None:
            assert self.start is not None
            h_in, blocks_in = self.start
            with self.b.scope("message_input"):
                previous = self.previous(blocks, len(blocks_in))
                self.messages = block_attention(self.b, self.params, self.query, previous, h, self.dims.hidden_size)
            h = h_in
            blocks[:] = blocks_in
        if passes < self.loop.recurrent:
            return h, None
        j = passes % self.loop.recurrent
        return h, self.messages[4 * j : 4 * j + 4]

    @staticmethod
    def previous(blocks: list[ir.Value], before: int) -> list[ir.Value]:
        """The previous pass's block states the messages attend: past the `before` ones the loop started with and
        past the first it appended (the loop's input itself, at the pass's first layer)."""
        return blocks[before + 1 :]


def loop_messages(b: GraphBuilder, dims: ModelDims, params: Params, query: str | None) -> LoopMessages | None:
    """The loop's messages where the family's loop layers read them (`query`, the stored queries' name), else None."""
    return LoopMessages(b, dims, params, query) if query is not None and dims.recurrent_loop is not None else None
