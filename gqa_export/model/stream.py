"""Config facts of the residual-stream mechanisms (arch/stream_spec.py; docs/gemma3n.md §1):
alternating updates, hyper-connection streams, gaussian top-k activation sparsity per layer, hard-token
embedder ranges, the scaled residual after the norm (MiniMax, docs/hybrid-state.md §8.16), the weight-shared
stacks run in cycles (HRM-Text)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from gqa_export.arch.spec import ArchSpec
from gqa_export.arch.stream_spec import HardTokenEmbedderNames, RecurrentStackNames
from gqa_export.errors import InputError
from gqa_export.model.config_reads import config_get

Option = Callable[..., Any]


@dataclass(frozen=True)
class AltUpDims:
    """K parallel streams, the one the layers compute (`active`), and whether the active stream is
    scaled by the stored correct_output_scale before the per-layer input reads it."""

    streams: int
    active: int
    correct_scale: bool


@dataclass(frozen=True)
class HardTokenRange:
    """Ids in [offset, offset + size) embedded by `names`' own table; `eps` of its RMSNorms."""

    names: HardTokenEmbedderNames
    offset: int
    size: int
    eps: float


@dataclass(frozen=True)
class HyperDims:
    """Hyper-connection residual streams (graph/hyper_connections.py): `streams` copies, the post
    weights' scale (hc_magnitude) and the epsilon added to every sigmoid weight (hc_eps)."""

    streams: int
    magnitude: float
    eps: float
    sinkhorn_iters: int = 0  # the comb weights' Sinkhorn iterations (HyperConnectionNames.form "sinkhorn"); 0: no comb


def hyper_dims(opt: Option, spec: ArchSpec) -> HyperDims | None:
    if spec.hyper_connections is None:
        return None
    streams = int(opt("hc_streams", 4))
    if streams < 1:
        raise InputError(f"hc_mult {streams} must be at least 1")
    sinkhorn = spec.hyper_connections.form == "sinkhorn"
    iters = int(opt("hc_sinkhorn_iters", 20)) if sinkhorn else 0
    if sinkhorn and iters < 1:
        raise InputError(f"hc_sinkhorn_iters {iters} must be at least 1 (the class normalizes the columns once first)")
    return HyperDims(streams, float(opt("hc_magnitude", 2.0)), float(opt("hc_eps", 1e-6)), iters)


@dataclass(frozen=True)
class RecurrentStackDims:
    """HRM-Text's schedule: `per_stack` layers in each stack, `high_cycles` x (`low_cycles` + 1)
    invocations (low_cycles of the low stack, then one of the high stack, per high cycle)."""

    per_stack: int
    high_cycles: int
    low_cycles: int

    @property
    def invocations(self) -> int:
        return self.high_cycles * (self.low_cycles + 1)

    def is_high(self, layer: int) -> bool:
        """Graph layer `layer` belongs to an invocation of the high stack."""
        return (layer // self.per_stack) % (self.low_cycles + 1) == self.low_cycles


def recurrent_stack_dims(opt: Option, spec: ArchSpec, num_layers: int) -> RecurrentStackDims | None:
    """The schedule, checked against num_hidden_layers (which the config rewrites to count every
    invocation's layers: one KV cache each)."""
    if spec.recurrent_stacks is None:
        return None
    stacks = RecurrentStackDims(int(opt("layers_per_stack")), int(opt("high_cycles")), int(opt("low_cycles")))
    if stacks.per_stack * stacks.invocations != num_layers:
        raise InputError(
            f"num_hidden_layers {num_layers} is not num_layers_per_stack {stacks.per_stack} x H_cycles "
            f"{stacks.high_cycles} x (L_cycles {stacks.low_cycles} + 1): the config was not written by its class"
        )
    return stacks


def stack_layer_prefixes(names: RecurrentStackNames, stacks: RecurrentStackDims) -> tuple[str, ...]:
    """Each graph layer's stored layer: layer i % per_stack of the stack its invocation runs."""
    layers = range(stacks.per_stack * stacks.invocations)
    return tuple((names.high if stacks.is_high(i) else names.low).format(i=i % stacks.per_stack) for i in layers)


def altup_dims(opt: Option, spec: ArchSpec) -> AltUpDims | None:
    if spec.alternating_updates is None:
        return None
    streams, active = int(opt("altup_streams", 1)), int(opt("altup_active", 0))
    if not 0 <= active < streams:
        raise InputError(f"altup_active_idx {active} is not one of the {streams} altup_num_inputs streams")
    return AltUpDims(streams, active, bool(opt("altup_correct_scale", True)))


def sparsity_pattern(opt: Option, spec: ArchSpec, layers: int) -> tuple[float, ...]:
    """Each layer's target sparsity of its MLP gate (0: dense); one value serves every layer."""
    if not spec.activation_sparsity:
        return (0.0,) * layers
    pattern = opt("activation_sparsity", None)
    if pattern is None:
        return (0.0,) * layers
    values = [float(pattern)] * layers if isinstance(pattern, (int, float)) else [float(v) for v in pattern]
    if len(values) != layers or any(not 0.0 <= v < 1.0 for v in values):
        raise InputError(f"activation_sparsity_pattern needs {layers} values in [0, 1) (got {pattern!r})")
    return tuple(values)


def sparsity_multiplier(sparsity: float) -> float:
    """The standard normal quantile of the target sparsity, as float32 (what HF's Normal(0, 1).icdf
    of a float32 tensor gives: the quantile of the float32-rounded target, rounded to float32)."""
    return float(np.float32(NormalDist().inv_cdf(float(np.float32(sparsity)))))


def hard_token_ranges(outer: Any | None, spec: ArchSpec) -> tuple[HardTokenRange, ...]:
    """The spec's hard-token ranges read from a multimodal config's sub-configs (none for a text model)."""
    if outer is None:
        return ()
    out = []
    for names in spec.hard_token_embedders:
        sub = getattr(outer, names.config_key, None)
        if sub is None:
            continue
        get = sub.get if isinstance(sub, dict) else lambda key, s=sub: getattr(s, key, None)
        offset, size = get("vocab_offset"), get("vocab_size")
        if offset is None or not size:
            continue
        out.append(HardTokenRange(names, int(offset), int(size), float(get("rms_norm_eps") or 1e-6)))
    return tuple(out)


def normed_residual_factors(config: Any, spec: ArchSpec) -> dict[str, tuple[float, float]] | None:
    """(alpha, beta) of each block kind ("attention", "state", "mlp") where the spec adds a block
    to its normed input (NormedResidualKeys); a key the config lacks is 1, as the config class
    defaults it. None for every other spec: the residual is the stream itself."""
    keys = spec.normed_residual
    if keys is None:
        return None
    pairs = {"attention": keys.attention, "state": keys.state, "mlp": keys.mlp}
    return {kind: (_factor(config, alpha), _factor(config, beta)) for kind, (alpha, beta) in pairs.items()}


def _factor(config: Any, key: str) -> float:
    value = config_get(config, key)
    return 1.0 if value is None else float(value)
