"""The middle layers run in a loop with shared weights, unrolled (ArchSpec.recurrent_loop, Dory;
docs/coverage.md §16): the schedule from the config, each graph layer's stored layer and cache index."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.layer_dims import LayerDims

Option = Callable[..., Any]


@dataclass(frozen=True)
class RecurrentLoopDims:
    """Dory's schedule: `inputs` stored layers once, the next `recurrent` ones `loops` times (the stream
    reset to l2(h) + l2(h_in) before each pass), the last `outputs` once. Graph layers follow the execution
    (inputs, pass 0, pass 1, ..., outputs); caches follow HF's index order: the stored layers' first
    (pass 0 in the recurrent ones), then passes 1.. appended, `recurrent` each. `last_only` (HF's "last_loop"
    mode): one cache per stored layer, written by the last pass; the earlier passes read it (the past plus
    their own tokens) and write nothing."""

    inputs: int
    recurrent: int
    outputs: int
    loops: int
    last_only: bool = False

    @property
    def stored(self) -> int:
        return self.inputs + self.recurrent + self.outputs

    @property
    def graph_layers(self) -> int:
        return self.stored + (self.loops - 1) * self.recurrent

    def stored_layer(self, g: int) -> int:
        """The stored layer graph layer `g` runs."""
        if g < self.inputs:
            return g
        if g < self.inputs + self.loops * self.recurrent:
            return self.inputs + (g - self.inputs) % self.recurrent
        return g - (self.loops - 1) * self.recurrent

    def cache_slot(self, g: int) -> int:
        """Graph layer `g`'s index in HF's cache (its past_key_values.N; the one it reads, for a pass that
        only reads)."""
        if self.last_only:
            return self.stored_layer(g)
        passes = g - self.inputs
        if g < self.inputs or passes < self.recurrent:
            return g
        if passes < self.loops * self.recurrent:
            return self.stored + passes - self.recurrent
        return self.stored_layer(g)

    def reads_only(self, g: int) -> bool:
        """Graph layer `g` attends over its cache slot's past without writing it (last_loop, earlier passes)."""
        return self.last_only and 0 <= g - self.inputs < (self.loops - 1) * self.recurrent

    def pass_start(self, g: int) -> int | None:
        """The pass graph layer `g` starts (its stream reset first), else None."""
        passes = g - self.inputs
        if 0 <= passes < self.loops * self.recurrent and passes % self.recurrent == 0:
            return passes // self.recurrent
        return None


def recurrent_loop_dims(opt: Option, spec: ArchSpec, num_layers: int) -> RecurrentLoopDims | None:
    """The loop schedule from the config (its class halves the counts of a config.json that lists attention
    and MLP blocks apart, so `num_layers` is the stored layers')."""
    if not spec.recurrent_loop:
        return None
    inputs, loops, end = int(opt("loop_input_layers")), int(opt("loop_count")), opt("loop_end")
    if end is not None:  # Inkling2-Loop names the loop's end layer (exclusive)
        recurrent, outputs = int(end) - inputs, num_layers - int(end)
    else:
        outputs, recurrent = int(opt("loop_output_layers")), opt("loop_layers")
        recurrent = num_layers - inputs - outputs if recurrent is None else int(recurrent)
    mode = str(opt("loop_cache_mode", "per_loop"))
    if mode not in ("per_loop", "last_loop"):
        raise InputError(f'{spec.name}: recurrent_kv_cache_mode {mode!r} is neither "per_loop" nor "last_loop"')
    loop = RecurrentLoopDims(inputs, recurrent, outputs, loops, mode == "last_loop")
    if loop.stored != num_layers or recurrent < 1 or loops < 1:
        raise InputError(
            f"{spec.name}: n_input_layers {inputs} + n_recurrent_layers {recurrent} + n_output_layers {outputs} must "
            f"be num_hidden_layers {num_layers}, with at least one recurrent layer and one loop"
        )
    return loop


def unrolled_layers(layers: Sequence[LayerDims], loop: RecurrentLoopDims) -> tuple[LayerDims, ...]:
    """One graph layer per execution of a stored layer, each its own cache (its index, its kv source), or
    reading the last pass's without writing it (`LayerDims.reads_past_only`)."""
    return tuple(
        replace(layers[loop.stored_layer(g)], index=g, kv_source=g, reads_past_only=loop.reads_only(g))
        for g in range(loop.graph_layers)
    )


def loop_layer_prefixes(layer_prefix: str, loop: RecurrentLoopDims) -> tuple[str, ...]:
    """Each graph layer's stored layer prefix."""
    return tuple(layer_prefix.format(i=loop.stored_layer(g)) for g in range(loop.graph_layers))
