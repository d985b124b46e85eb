"""RWKV-4's sizes and its inference-time rescaling, read from the config (docs/hybrid-state.md §8.18).

HF's RwkvModel divides, in eval mode, the weights of each block's attention.output and
feed_forward.value by 2 ** (i // rescale_every) and the residual stream by 2 after every
rescale_every-th block (`_rescale_layers`, run on the first forward in eval mode, so generate()
always runs rescaled). The LayerNorms cancel the scale except through their epsilon, so the export
computes the same rescaled stream rather than the unscaled one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError

# RwkvModel's ln_out is nn.LayerNorm(hidden) at torch's default eps, whatever layer_norm_epsilon says
FINAL_NORM_EPS = 1e-5


@dataclass(frozen=True)
class RwkvDims:
    """channels: the time mix's width C (attention_hidden_size, hidden_size unless given);
    rescale_every: the residual stream halves after every this many blocks (0: never)."""

    channels: int
    rescale_every: int

    def output_scale(self, i: int) -> float:
        """What block i's attention.output and feed_forward.value outputs are multiplied by."""
        return 2.0 ** -(i // self.rescale_every) if self.rescale_every > 0 else 1.0

    def halves_after(self, i: int) -> bool:
        """Whether the residual stream is divided by 2 after block i."""
        return self.rescale_every > 0 and (i + 1) % self.rescale_every == 0


def rwkv_dims(opt: Callable[..., Any], spec: ArchSpec, mixers: list[str], hidden: int) -> RwkvDims | None:
    """The RWKV sizes (None when the model has no RWKV block)."""
    if "rwkv" not in mixers:
        return None
    eps = float(opt("norm_eps", FINAL_NORM_EPS))
    if eps != FINAL_NORM_EPS:
        raise InputError(
            f"{spec.name}'s ln_out normalizes at eps {FINAL_NORM_EPS} whatever layer_norm_epsilon says; a config "
            f"with layer_norm_epsilon {eps} is not exported"
        )
    channels = int(opt("rwkv_channels", 0) or hidden)
    if channels != hidden:  # RwkvModel sizes its num/den/max state by hidden_size: its cached forward fails
        raise InputError(
            f"{spec.name} with attention_hidden_size {channels} != hidden_size {hidden} is not exported: transformers' "
            "RwkvModel keeps its WKV state hidden_size wide, so such a model cannot generate there to compare with"
        )
    return RwkvDims(channels, int(opt("rwkv_rescale", 0) or 0))
