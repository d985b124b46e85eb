"""Which token mixer each layer has, and the sizes hybrid families derive from their config.

Hybrid decoders name each layer's mixer in `layer_types` ("full_attention", "conv", ...); a
family's spec maps those values to mixer kinds (arch.spec.MixerSpec). transformers' config classes
fill `layer_types` in when a checkpoint spells the pattern otherwise (LFM2's `full_attn_idxs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError

Option = Callable[..., Any]  # dims.read_dims' opt(name, default): a config value by its spec key


def sparse_layer(opt: Option, spec: ArchSpec, i: int) -> bool:
    """Whether layer i's MLP is the sparse block: not before the first `first_dense_layers` (LFM2-MoE's
    num_dense_layers), not in mlp_only_layers, and on the decoder_sparse_step grid (Qwen-MoE)."""
    if spec.moe is None or not opt("num_experts") or opt("enable_moe", True) is False:
        return False
    if i < int(opt("first_dense_layers", 0) or 0):
        return False
    step = int(opt("decoder_sparse_step", 1) or 1)
    return i not in (opt("mlp_only_layers") or ()) and (i + 1) % step == 0


def mixer_of(spec: ArchSpec, layer_type: str | None) -> str:
    """A layer's mixer kind: attention unless the family's spec maps its type to another."""
    if spec.mixers is None or layer_type is None:
        return "attention"
    return spec.mixers.kinds.get(layer_type, "attention")


def feed_forward_size(config: Any, opt: Option, spec: ArchSpec) -> int:
    """The dense MLP's width: intermediate_size, or LFM2's adjusted width (2/3 of it, times the
    optional multiplier, rounded up to a multiple) when its config asks for the adjustment."""
    size = int(config.intermediate_size)
    if spec.ffn_size != "two_thirds_rounded" or not opt("ffn_auto_adjust", False):
        return size
    size = int(2 * size / 3)
    multiplier = opt("ffn_multiplier")
    if multiplier is not None:
        multiple = int(opt("ffn_multiple_of", 1) or 1)
        size = int(float(multiplier) * size)
        size = multiple * ((size + multiple - 1) // multiple)
    return size


def conv_kernel(opt: Option, spec: ArchSpec, mixers: list[str]) -> int:
    """The short convolutions' kernel size K (0 when the model has none)."""
    if "short_conv" not in mixers:
        return 0
    kernel = int(opt("conv_kernel", 0) or 0)
    if kernel < 1:
        raise InputError(f"{spec.name} has short-convolution layers but its config gives no kernel size (conv_L_cache)")
    return kernel


@dataclass(frozen=True)
class DeltaNetDims:
    """A gated-DeltaNet layer's shapes (Qwen3.5's linear_attention layers, docs/hybrid-state.md §5):
    Hk key/query heads of dk, Hv value heads of dv (each key head serves Hv / Hk consecutive value
    heads), and the causal conv's kernel K over the q | k | v channels."""

    kernel: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int

    @property
    def conv_channels(self) -> int:
        """The convolved channels: q and k (Hk dk each) and v (Hv dv)."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim


def deltanet_dims(opt: Option, spec: ArchSpec, mixers: list[str]) -> DeltaNetDims | None:
    """The gated-DeltaNet shapes (None when the model has no such layer); every one is required,
    since the runtime sizes both states from them."""
    if "gated_deltanet" not in mixers:
        return None
    keys = (
        "linear_conv_kernel",
        "linear_key_heads",
        "linear_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
    )
    values = {key: int(opt(key, 0) or 0) for key in keys}
    missing = [spec.config_keys[key] for key, value in values.items() if value < 1]
    if missing:
        raise InputError(f"{spec.name} has gated-DeltaNet layers but its config gives no {', '.join(missing)}")
    dims = DeltaNetDims(*values.values())
    if dims.value_heads % dims.key_heads:
        raise InputError(
            f"{spec.name}: {dims.value_heads} DeltaNet value heads do not divide among {dims.key_heads} key heads"
        )
    return dims
