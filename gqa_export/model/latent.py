"""Shapes and numerics of multi-head latent attention (DeepSeek-V2/V3) read from the config, and
the grouped expert selection of their routers (docs/latent-attention.md).

The cache holds the EXPANDED keys and values in the ordinary GQA layout, one kv head per query
head: a key is [k_nope (qk_nope_head_dim) | k_rope (qk_rope_head_dim, the one rope key every head
shares)], a value is v (v_head_dim) zero-padded to the key's width, since GroupQueryAttention and
ORT GenAI size key and value buffers with one head_size. So every attention mode runs it as it
is; the latent form (kv_lora_rank + qk_rope_head_dim numbers per token and layer) is smaller.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.config_reads import config_get, layer_config


@dataclass(frozen=True)
class LatentDims:
    """One latent-attention layer's widths (every layer has the same)."""

    q_lora_rank: int  # 0: the query comes from q_proj directly (V2-Lite)
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int
    v_head: int
    interleaved: bool  # the rope dims rotate in GPT-J pairs (2i, 2i+1); else rotate-half
    cached: bool = False  # the cache holds [latent | rope key] as one kv head (recipe latent_cache)
    # DeepSeek sparse attention's indexer keeps this many keys per query (0: no indexer); within it
    # every key is kept and the layer is plain MLA, beyond it a per-query selection the graph lacks
    index_topk: int = 0
    # LongCat-Flash (spec latent_lora_scale): the query times sqrt(hidden / q_lora_rank) after q_b_proj,
    # the normed latent times sqrt(hidden / kv_lora_rank) before kv_b_proj (and before the latent cache)
    q_scale: float = 1.0
    kv_scale: float = 1.0

    @property
    def head_dim(self) -> int:
        """The cached key's (and padded value's) width per head."""
        return self.qk_nope + self.qk_rope

    def kv_bytes_per_token(self, heads: int, itemsize: int) -> tuple[int, int]:
        """(expanded, latent) cache bytes per token and layer: what the GQA layout stores (keys and
        padded values of every head) against the compressed latent plus the shared rope key."""
        return 2 * heads * self.head_dim * itemsize, (self.kv_lora_rank + self.qk_rope) * itemsize


@dataclass(frozen=True)
class LayerAttention:
    """A layer whose latent attention has other shapes than the model's first layer (dots3-note's sliding
    layers, `per_layer_config`): its heads, widths and softmax scale; the graph builds that layer with them
    and its KV cache takes its own shape (concrete per-layer dims, docs/gemma4.md §4)."""

    num_heads: int
    latent: LatentDims
    scale: float


def model_latent(
    config: Any, spec: ArchSpec, hidden: int, opt: Any, opt_for: Callable[[Any], Any]
) -> tuple[LatentDims | None, dict[int, LayerAttention]]:
    """The model's latent widths (its first layer's) and, per layer that differs from them, its own. A
    heterogeneous config (transformers >= 5.25, dots3-note's per_layer_config) refuses global access to
    per-layer keys, so each layer is read from its own view (`opt_for(view)`: the spec's reader of it)."""
    if spec.latent_attention is None or not config_get(config, "is_heterogeneous"):
        lat = latent_dims(opt, spec, hidden)
        return lat, _nope_layers(config, opt, lat)
    views = [layer_config(config, i) for i in range(int(config.num_hidden_layers))]
    first = latent_dims(opt_for(views[0]), spec, hidden)
    assert first is not None
    heads = [int(view.num_attention_heads) for view in views]
    out = {}
    for i, view in enumerate(views[1:], 1):
        lat = latent_dims(opt_for(view), spec, hidden)
        assert lat is not None
        if lat != first or heads[i] != heads[0]:
            out[i] = LayerAttention(heads[i], lat, latent_scale(view, lat))
    return first, out


def latent_dims(opt: Any, spec: ArchSpec, hidden: int = 0) -> LatentDims | None:
    """The config's latent-attention widths, for a spec with latent attention (`hidden`: the model's
    width, which LongCat-Flash's lora scales read)."""
    if spec.latent_attention is None:
        return None
    lat = LatentDims(
        q_lora_rank=int(opt("q_lora_rank", 0) or 0),
        kv_lora_rank=int(opt("kv_lora_rank")),
        qk_nope=int(opt("qk_nope_head_dim")),
        qk_rope=int(opt("qk_rope_head_dim")),
        v_head=int(opt("v_head_dim")),
        # the config's rope_interleave (DeepSeek-V3), else the spec's pair layout (V2: pairs; MiniCPM3, whose
        # class reads no rope_interleave: rotate-half)
        interleaved=bool(opt("rope_interleave", spec.rope_interleaved)),
        index_topk=int(opt("index_topk", 0) or 0),
    )
    if spec.latent_lora_scale:  # LongCat-Flash's mla_scale_q_lora / mla_scale_kv_lora
        if not lat.q_lora_rank:
            raise InputError(f"{spec.name}'s attention always has a query LoRA: set q_lora_rank in config.json")
        lat = replace(lat, q_scale=(hidden / lat.q_lora_rank) ** 0.5, kv_scale=(hidden / lat.kv_lora_rank) ** 0.5)
    if lat.v_head > lat.head_dim:
        raise InputError(
            f"v_head_dim {lat.v_head} is wider than the key (qk_nope_head_dim + qk_rope_head_dim = {lat.head_dim}); "
            "the expanded cache pads values to the key's width and cannot hold wider ones"
        )
    return lat


def latent_scale(config: Any, lat: LatentDims) -> float:
    """The softmax scale: (qk_nope + qk_rope) ** -0.5, times mscale(factor, mscale_all_dim) squared
    when the rope is scaled and rope_parameters sets mscale_all_dim (transformers' yarn_apply_mscale)."""
    scale = float(lat.head_dim) ** -0.5
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    m_all = params.get("mscale_all_dim", 0)
    if rope_type != "default" and m_all:
        factor = float(params["factor"])
        m = 1.0 if factor <= 1 else 0.1 * float(m_all) * math.log(factor) + 1.0
        scale = scale * m * m
    return scale


def _nope_layers(config: Any, opt: Any, lat: LatentDims | None) -> dict[int, LayerAttention]:
    """The latent layers without RoPE (no_rope_layers 0, Mistral-Large-4): the rope channels folded into the nope
    ones, qk_nope + qk_rope wide with no rope key (kv_a yields the latent alone); the heads and scale unchanged."""
    flags = opt("no_rope_layers")
    if lat is None or not flags:
        return {}
    nope = LayerAttention(
        int(config.num_attention_heads), replace(lat, qk_nope=lat.head_dim, qk_rope=0), latent_scale(config, lat)
    )
    return {i: nope for i, uses_rope in enumerate(flags) if not uses_rope}


def latent_kv_sources(opt: Any, n: int) -> list[int] | None:
    """Each layer's latent KV source (Mistral-Large-4's kv_source_layers), None without the key. HF hands a sharing
    layer the cache of the LAST earlier producer of its rope kind (KVSharingDict keyed "rope" / "nope"); a config
    naming another source runs differently from what it says, and is refused."""
    sources = opt("kv_source_layers")
    if not sources:
        return None
    flags = opt("no_rope_layers") or [1] * n
    producers = {int(s) for i, s in enumerate(sources) if int(s) != i}
    for i, source in enumerate(sources):
        same_kind = [j for j in sorted(producers) if j < i and bool(flags[j]) == bool(flags[i])]
        if int(source) != i and (not same_kind or same_kind[-1] != int(source)):
            raise InputError(
                f"kv_source_layers[{i}] is {source}, but transformers hands layer {i} the cache of the last earlier "
                f"producer of its rope kind ({same_kind[-1] if same_kind else 'none'}): fix kv_source_layers"
            )
    return [int(s) for s in sources]
