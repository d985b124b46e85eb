"""Two weight-shared layer stacks run in cycles over two streams (ArchSpec.recurrent_stacks, HRM-Text;
docs/coverage.md, the hrm_text section).

transformers' HrmTextModel keeps a low stream z_L (from the stored z_L_init vector) and a high stream
z_H (the scaled embeddings); per high cycle it runs z_L = L(z_L + z_H) L_cycles times, then
z_H = H(z_H + z_L), where each stack call runs its layers and ends in a weightless RMSNorm; z_H feeds the
lm_head. The graph unrolls the calls: graph layer g is layer g % per_stack of its invocation's stack
(ArchSpec.layer_prefixes names its stored weights), with its own KV cache. The first layer of an
invocation reads the sum of both streams, the last one's normed output replaces its stack's stream.
Every invocation reads the same initializers (GraphBuilder.reusing_initializers): written once.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.blocks import normalize
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params
from gqa_export.model.dims import ModelDims


class StackStreams:
    """The low and high streams between stack invocations."""

    def __init__(self, b: GraphBuilder, embeddings: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params) -> None:
        assert dims.recurrent_stacks is not None and spec.recurrent_stacks is not None
        self.b, self.dims, self.params = b, dims, params
        self.stacks = dims.recurrent_stacks
        init = spec.tensor(spec.recurrent_stacks.low_init)
        # [H], broadcast over [B, S, H] as HF's expand_as does
        self.low: ir.Value = b.initializer(init, params.vector([init]))
        self.high = embeddings

    def enter(self, i: int, h: ir.Value) -> ir.Value:
        """Graph layer i's input: at an invocation's first layer, its own stream plus the other one."""
        if i % self.stacks.per_stack:
            return h
        if self.stacks.is_high(i):
            return self.b.op("Add", self.high, self.low, name="stack_input")
        return self.b.op("Add", self.low, self.high, name="stack_input")

    def leave(self, i: int, h: ir.Value) -> ir.Value:
        """Graph layer i's output: at an invocation's last layer, the stack's final norm, kept as its stream."""
        if (i + 1) % self.stacks.per_stack:
            return h
        # the stacks' final norms hold no weight (the norm kind is rms_free), so no tensor name is read
        out = normalize(self.b, h, "", self.params, self.dims, "stack_norm", self.dims.hidden_size)
        if self.stacks.is_high(i):
            self.high = out
        else:
            self.low = out
        return out


def stack_streams(
    b: GraphBuilder, embeddings: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params
) -> StackStreams | None:
    """The streams where the family runs weight-shared stacks, else None."""
    return StackStreams(b, embeddings, dims, spec, params) if dims.recurrent_stacks is not None else None


def shared_weights(b: GraphBuilder, shared: bool) -> AbstractContextManager[None]:
    """Layer weights registered once and read by every invocation of their stored layer (weight-shared
    stacks, Dory's loop)."""
    return b.reusing_initializers() if shared else nullcontext()
