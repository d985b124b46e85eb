"""Per-layer dimensions read from an HF config: each decoder layer's window, rope table, attention
shape, MLP width, mixer and KV source (model/dims.py's `ModelDims.layers`).

Per-layer attention comes from `layer_types` where the config has it, else a `sliding_window`
applies to every layer; shapes are per layer (Gemma-4's `config.per_layer_config[i]`), and KV-shared
layers point at the layer whose cache they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.config_reads import config_get, layer_config, layer_heads, view_heads
from gqa_export.model.latent import LatentDims, LayerAttention, latent_kv_sources
from gqa_export.model.layer_kinds import (
    blocks_of,
    feed_forward_size,
    flagged_kv_heads,
    mixer_of,
    nope_layer,
    parallel_attention,
    sparse_layer,
)
from gqa_export.model.layer_ropes import (
    UNSCALED,
    cache_head_dim,
    layer_thetas,
    nope_types,
    rope_keys,
    theta_rope_key,
)
from gqa_export.model.shared_blocks import shared_uses
from gqa_export.model.stream import (
    sparsity_pattern,
)

SLIDING = "sliding_attention"
CHUNKED = "chunked_attention"  # Llama-4: attention within chunks of attention_chunk_size positions


@dataclass(frozen=True)
class LayerDims:
    """One decoder layer's attention and MLP shapes.

    kv_source: the layer whose K/V this layer attends over: itself, or for a KV-shared layer
    (Gemma-4 `num_kv_shared_layers`) the last earlier layer of the same type that keeps a cache.
    Such a layer has no K/V projections and no cache of its own.
    """

    index: int
    window: int  # GQA local_window_size: keys attended incl. the current one; -1 = full
    rope: str | None  # key into ModelDims.ropes; None: a NoPE layer
    head_dim: int
    num_kv_heads: int
    intermediate_size: int
    kv_source: int
    k_eq_v: bool = False  # values are the raw key projection (Gemma-4 full layers, attention_k_eq_v)
    sparse: bool = False  # the MLP is a mixture of experts
    mixer: str = "attention"  # arch.mixer_spec.MIXER_KINDS: a short_conv layer has conv state, no KV cache
    parallel_attention: bool = False  # attention beside the state mixer, outputs added (Falcon-H1)
    blocks: str = "mixer_and_mlp"  # arch.mixer_spec.LAYER_BLOCKS: both, the mixer alone, or the MLP alone
    activation_sparsity: float = 0.0  # the MLP gate's gaussian top-k target sparsity (0: dense)
    chunk: int = 0  # attends only to earlier keys of its own chunk of this many positions (Llama-4); 0: none
    # Zamba2: this layer's use of the shared transformer blocks (-1: none) and the layer holding its weights
    shared_use: int = -1
    shared_source: int = -1
    num_heads: int = 0  # query heads where a layer has its own (Laguna's num_attention_heads_per_layer); 0: the model's
    # a latent-attention layer with its own heads and widths (dots3-note's per_layer_config); None: the model's
    attention: LayerAttention | None = None
    # the layer's attention logits times this on top of the softmax scale (Ergo's full layers: queries and keys
    # each times sqrt(global_attention_scale)); 1.0: none
    score_factor: float = 1.0
    # attends over another graph layer's cache slot (ModelDims.cache_slot) and its own tokens without writing
    # it: no cache of its own (Dory's last_loop mode, the passes before the last)
    reads_past_only: bool = False

    @property
    def shares_kv(self) -> bool:
        return self.kv_source != self.index

    @property
    def attends(self) -> bool:
        """Whether the layer has attention (and so a KV cache unless it shares one)."""
        return self.mixer == "attention" or self.parallel_attention or self.shared_use >= 0


def read_layers(
    config: Any,
    opt: Any,
    heads: int,
    hidden: int,
    spec: ArchSpec,
    latent: LatentDims | None = None,
    overrides: dict[int, LayerAttention] | None = None,
) -> tuple[LayerDims, ...]:
    n = int(config.num_hidden_layers)
    window = int(opt("sliding_window", 0) or 0)
    types = opt("layer_types")
    raw_types = types
    if types and spec.layer_type_names:  # a family's own spellings of the layer types (GPT-Neo)
        types = [spec.layer_type_names.get(t, t) for t in types]
    no_rope = opt("no_rope_layers")  # SmolLM3: 1 = this layer uses RoPE, 0 = NoPE
    thetas = layer_thetas(opt("layer_rope_theta"), n)  # GraniteSWA: each layer's RoPE base, 0 = NoPE
    scaled = opt("scaled_rope_layers")  # Molmo2: the layers listed run the scaled rope, the others unscaled
    shared = int(opt("num_kv_shared_layers", 0) or 0)
    k_eq_v = bool(opt("attention_k_eq_v", False))
    double_wide = bool(opt("double_wide_mlp", False))
    intermediate = feed_forward_size(config, opt, spec)  # one width, or one per layer
    sparsity = sparsity_pattern(opt, spec, n)
    configured_ropes, nopes = rope_keys(config, spec), nope_types(config, spec)
    first_shared = n - shared
    uses = shared_uses(config, spec, types)
    latent_sources = latent_kv_sources(opt, n) if latent is not None else None  # Mistral-Large-4
    out: list[LayerDims] = []
    for i in range(n):
        layer_type = types[i] if types else None
        sliding = layer_type == SLIDING if types else True
        windowed = window > 0 and sliding
        rope_key = layer_type if layer_type in configured_ropes else "default"
        if rope_key == "default" and raw_types and raw_types[i] in configured_ropes:  # ZAYA: keyed by its own names
            rope_key = raw_types[i]
        if spec.layer_rope_keys.get(layer_type or "") in configured_ropes:  # DeepSeek-V4: "main" / "compress"
            rope_key = spec.layer_rope_keys[layer_type or ""]
        if (no_rope is not None and not no_rope[i]) or layer_type in nopes:
            rope_key = None
        if thetas is not None and rope_key is not None:
            rope_key = theta_rope_key(config, float(thetas[i]))
        if scaled is not None and rope_key == "default" and i not in scaled:
            rope_key = UNSCALED
        own_heads = layer_heads(opt, i, heads) or (view_heads(config, i, heads) if latent is None else 0)
        head_dim, kv_heads = _attention_shape(config, i, layer_type, opt, own_heads or heads, hidden)
        kv_heads = flagged_kv_heads(opt, spec, heads, kv_heads, bool(types) and sliding)
        if types and sliding and opt("sliding_heads") is not None:  # Inkling: the sliding layers' own heads, width
            own_heads, kv_heads, head_dim = (
                int(opt(k)) for k in ("sliding_heads", "sliding_kv_heads", "sliding_head_dim")
            )
        if spec.head_dim_from_hidden:  # StableLM's attention ignores config.head_dim
            head_dim = hidden // heads
        head_dim = cache_head_dim(spec, head_dim)  # DiffLlama's and Doge's cache heads are wider
        own = (overrides or {}).get(i)
        if own is not None:  # a layer with its own latent shapes (dots3-note's sliding layers)
            head_dim, kv_heads = own.latent.head_dim, own.num_heads
        elif latent is not None:  # the expanded cache: a [k_nope | k_rope] key per query head
            head_dim, kv_heads = latent.head_dim, heads
        if nope_layer(opt, spec, sliding, window, dense=not sparse_layer(opt, spec, i, layer_type)):
            rope_key = None  # Cohere2 / EXAONE-4: global layers without RoPE; Granite-4.0-H: none has it
        source = i
        if shared and i >= first_shared:
            same_type = [j for j in range(first_shared) if (types[j] if types else None) == layer_type]
            if not same_type:
                raise InputError(
                    f"layer {i} shares the KV cache of an earlier '{layer_type}' layer, but none of the "
                    f"first {first_shared} layers has that type; check num_kv_shared_layers and layer_types"
                )
            source = same_type[-1]
        if latent_sources is not None:
            source = latent_sources[i]
        out.append(
            LayerDims(
                index=i,
                window=window if windowed else -1,
                rope=rope_key,
                head_dim=head_dim,
                num_kv_heads=kv_heads,
                intermediate_size=(intermediate[i] if isinstance(intermediate, tuple) else intermediate)
                * (2 if double_wide and source != i else 1),
                kv_source=source,
                k_eq_v=k_eq_v and types is not None and not sliding,
                sparse=sparse_layer(opt, spec, i, layer_type),
                mixer=mixer_of(spec, layer_type),
                parallel_attention=parallel_attention(spec, mixer_of(spec, layer_type)),
                blocks=blocks_of(spec, layer_type),
                activation_sparsity=sparsity[i],
                chunk=int(opt("attention_chunk", 0) or 0) if layer_type == CHUNKED else 0,
                shared_use=uses.get(i, (-1, -1))[0],
                shared_source=uses.get(i, (-1, -1))[1],
                num_heads=own_heads,
                attention=own,
            )
        )
    for layer in out:  # a KV-shared layer attends over its source's cache: the shapes must agree
        src = out[layer.kv_source]
        if (layer.head_dim, layer.num_kv_heads) != (src.head_dim, src.num_kv_heads):
            raise InputError(
                f"layer {layer.index} shares layer {src.index}'s KV cache but their head_dim/kv heads differ "
                f"({layer.head_dim}/{layer.num_kv_heads} vs {src.head_dim}/{src.num_kv_heads})"
            )
    return tuple(out)


def _attention_shape(config: Any, i: int, layer_type: str | None, opt: Any, heads: int, hidden: int) -> tuple[int, int]:
    """(head_dim, num_kv_heads) of layer i: per-layer config views first (transformers >= 5.2x),
    else the global-layer keys older Gemma-4 configs carry, else the global values; (0, 0) without attention."""
    if not heads:
        return 0, 0
    layer = layer_config(config, i)
    head_dim = int(config_get(layer, "head_dim") or hidden // heads)
    kv_heads = int(config_get(layer, "num_key_value_heads") or heads)
    if layer is config and layer_type not in (None, SLIDING):
        global_dim = opt("global_head_dim")
        if global_dim:
            head_dim = int(global_dim)
            global_kv = opt("global_kv_heads")
            if global_kv and opt("attention_k_eq_v", False):
                kv_heads = int(global_kv)
    if heads % kv_heads:
        raise InputError(f"layer {i}: num_attention_heads {heads} is not a multiple of its {kv_heads} kv heads")
    return head_dim, kv_heads
