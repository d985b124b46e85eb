"""Which token mixer each layer has, and the sizes hybrid families derive from their config.

Hybrid decoders name each layer's mixer in `layer_types` ("full_attention", "conv", ...); a
family's spec maps those values to mixer kinds (arch.mixer_spec.MixerSpec). transformers' config classes
fill `layer_types` in when a checkpoint spells the pattern otherwise (LFM2's `full_attn_idxs`), or
rename its values (Granite-4.0-H's "mamba" / "attention" on disk, "linear_attention" /
"full_attention" once transformers 5.x reads it), so a spec maps every spelling it may meet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.model.config_reads import transformers_version

Option = Callable[..., Any]  # dims.read_dims' opt(name, default): a config value by its spec key


def sparse_layer(opt: Option, spec: ArchSpec, i: int, layer_type: str | None = None) -> bool:
    """Whether layer i's MLP is the sparse block: where its type is the spec's sparse layer type
    (Nemotron-H's "moe") when the spec names one, else the first sublayer of each pair for a shortcut
    block (LongCat-Flash), else on Jamba's grid where the config has one
    (i % period == offset, and more than one expert), else by the config's mlp_layer_types list
    where it has one, else not before the first `first_dense_layers`
    (LFM2-MoE's num_dense_layers), not after `last_sparse_layer`, not in mlp_only_layers, and on the
    decoder_sparse_step grid (Qwen-MoE)."""
    if spec.moe is None or not opt("num_experts") or opt("enable_moe", True) is False:
        return False
    rules, read = spec.moe.layer_rules, opt

    def opt(name: str, default: Any = None) -> Any:  # a placement key the family's class never reads: its default
        return read(name, default) if rules is None or name not in _LAYER_RULES or name in rules else default

    if spec.moe.layer_type is not None:
        return layer_type == spec.moe.layer_type
    if spec.moe.shortcut:  # LongCat-Flash: the first sublayer of each pair runs the shortcut block
        return i % spec.sublayers == 0
    kinds = opt("mlp_layer_types")  # one "dense" / "sparse" per layer, where the config class keeps the list
    if kinds is not None:
        return _listed_mlp_kind(kinds, i, spec.moe.sparse_kinds)
    period = int(opt("expert_layer_period", 0) or 0)
    if period:
        return int(opt("num_experts")) > 1 and i % period == int(opt("expert_layer_offset", 0) or 0)
    listed = opt("sparse_layers")  # Llama-4's moe_layers: the sparse layers by index
    if listed is not None:
        return i in listed
    if i < int(opt("first_dense_layers", 0) or 0):
        return False
    last = opt("last_sparse_layer")
    if last is not None and 0 <= int(last) < i:  # ERNIE-4.5-MoE's moe_layer_end_index (-1: the last layer)
        return False
    step = int(opt("decoder_sparse_step", 1) or 1)
    return i not in (opt("mlp_only_layers") or ()) and (i + 1) % step == 0


# the options that place the sparse layers (MoeSpec.layer_rules names the ones a family's class reads)
_LAYER_RULES = frozenset(
    {"mlp_layer_types", "expert_layer_period", "sparse_layers", "first_dense_layers",
     "last_sparse_layer", "decoder_sparse_step", "mlp_only_layers"}
)  # fmt: skip


def _listed_mlp_kind(kinds: Any, i: int, sparse_kinds: tuple[str, ...] = ()) -> bool:
    """Layer i's entry of an mlp_layer_types list (GLM-4-MoE-Lite: the decoder layer builds the
    experts where it says "sparse", the dense MLP where "dense"; its config class fills the list in
    from the layer count, and ignores first_k_dense_replace). `sparse_kinds`: the family's own sparse
    values (DeepSeek-V4's "moe" / "hash_moe")."""
    sparse = ("sparse", *sparse_kinds)
    if i >= len(kinds) or kinds[i] not in ("dense", *sparse):
        found = kinds[i] if i < len(kinds) else "nothing"
        allowed = ", ".join(repr(k) for k in ("dense", *sparse))
        raise InputError(f"mlp_layer_types[{i}] is {found!r}; each layer is one of {allowed}")
    return kinds[i] in sparse


def nope_layer(opt: Option, spec: ArchSpec, sliding: bool, window: int, dense: bool = False) -> bool:
    """Whether an attention layer goes without RoPE by the spec's rope_layers: Cohere2's global
    layers, EXAONE-4's when the model has a window, every layer of a Granite-4.0-H whose
    position_embedding_type is not "rope", every layer of an OLMo-Hybrid whose rope_parameters hold no
    rope_theta (the released checkpoints'), every layer of a family without RoPE (Jamba, Nemotron-H);
    Cohere2-MoE's global layers but its `dense` ones when prefix_dense_sliding_window_pattern is 1
    (its attention's force_rope)."""
    forced = spec.rope_layers == "sliding_or_dense_prefix" and dense and opt("dense_prefix_window_pattern", 1) == 1
    return (
        spec.rope_layers == "none"
        or (spec.rope_layers in ("sliding", "sliding_or_dense_prefix") and not sliding and not forced)
        or (spec.rope_layers == "sliding_if_windowed" and window > 0 and not sliding)
        or (spec.rope_layers == "if_configured" and opt("position_embedding_type") != "rope")
        or (spec.rope_layers == "if_flag" and not opt("rope_flag", False))
        or (spec.rope_layers == "if_theta" and opt("rope_theta") is None)
    )


def query_temperature(opt: Option) -> tuple[float, int] | None:
    """(attn_scale, floor_scale) of Llama-4's attention temperature tuning of NoPE layers' queries,
    where the config turns it on (attn_temperature_tuning)."""
    if not opt("temperature_tuning", False):
        return None
    floor = int(opt("temperature_floor", 0) or 0)
    if floor < 1:
        raise InputError(f"attn_temperature_tuning is on but floor_scale is {floor}; set a positive floor_scale")
    return float(opt("temperature_scale", 0.1)), floor


def blocks_of(spec: ArchSpec, layer_type: str | None) -> str:
    """What a layer holds (arch.mixer_spec.LAYER_BLOCKS): a mixer and an MLP unless the family's spec
    says its type holds one of them alone (Nemotron-H); the mixer alone in a stack without attention
    (MixerSpec.attention False: Mamba, Mamba2), whatever its config names its layers."""
    if spec.mixers is not None and not spec.mixers.attention:
        return spec.mixers.state_only_blocks
    if layer_type is None:
        return "mixer_and_mlp"
    return spec.layer_blocks.get(layer_type, "mixer_and_mlp")


def mixer_of(spec: ArchSpec, layer_type: str | None) -> str:
    """A layer's mixer kind: "none" for a layer that holds only its feed-forward block, the spec's
    kind for every layer (Falcon-H1, whose 4.x configs name no layer types), else attention unless
    the family's spec maps its type to another."""
    if blocks_of(spec, layer_type) == "mlp":
        return "none"
    if spec.mixers is not None and spec.mixers.every_layer is not None:
        return spec.mixers.every_layer
    if spec.mixers is None or layer_type is None:
        return "attention"
    return spec.mixers.kinds.get(layer_type, "attention")


def parallel_attention(spec: ArchSpec, mixer: str) -> bool:
    """Whether a layer runs attention beside its recurrent-state mixer (MixerSpec mixing "parallel")."""
    return mixer != "attention" and spec.mixers is not None and spec.mixers.mixing == "parallel"


def feed_forward_size(config: Any, opt: Option, spec: ArchSpec) -> int | tuple[int, ...]:
    """The dense MLP's width: intermediate_size (or half of it: RecurrentGemma), Granite-4.0-H's
    shared_intermediate_size, or LFM2's
    adjusted width (2/3 of it, times the optional multiplier, rounded up to a multiple) when its
    config asks for the adjustment."""
    if spec.ffn_size == "shared":  # Granite-4.0-H: the layer's dense MLP is its shared_mlp
        return int(opt("shared_expert_intermediate_size"))
    if spec.ffn_size == "rounded_ratio":  # xLSTM: hidden * ffn_proj_factor rounded up to a multiple, as its class does
        multiple = int(opt("ffn_multiple_of", 64))
        return int(((int(config.hidden_size) * float(opt("ffn_ratio")) + multiple - 1) // multiple) * multiple)
    if spec.ffn_size == "hidden_ratio":  # Bloom (4), MPT (expansion_ratio): a multiple of hidden_size
        return int(float(opt("ffn_ratio", 4)) * int(config.hidden_size))
    configured = opt("intermediate_size")
    if spec.ffn_size == "half":  # RecurrentGemma's MLP: intermediate_size // 2 wide
        return int(configured) // 2
    if isinstance(configured, (list, tuple)):  # one width per layer (Gemma-3n)
        return tuple(int(v) for v in configured)
    size = int(configured) if configured is not None else 4 * int(config.hidden_size)  # GPT-2's n_inner None: 4 H
    if spec.ffn_size != "two_thirds_rounded" or not opt("ffn_auto_adjust", False):
        return size
    size = int(2 * size / 3)
    multiplier = opt("ffn_multiplier")
    if multiplier is not None:
        multiple = int(opt("ffn_multiple_of", 1) or 1)
        size = int(float(multiplier) * size)
        size = multiple * ((size + multiple - 1) // multiple)
    return size


def flagged_kv_heads(opt: Option, spec: ArchSpec, heads: int, kv_heads: int, sliding: bool = False) -> int:
    """The kv heads by the spec's kv_heads_rule: the config's kv-heads key ("config"), twice that
    on a sliding layer ("doubled_on_sliding": MiMo-V2-Flash's attention), or Falcon's flags
    ("multi_query_flags"): grouped_kv (new_decoder_architecture) reads num_kv_heads, else
    multi_query means one kv head, else every head has its own."""
    if spec.kv_heads_rule == "config":
        return kv_heads
    if spec.kv_heads_rule == "doubled_on_sliding":
        if sliding and heads % (2 * kv_heads):  # transformers' sliding layers fail on it too (a size mismatch)
            raise InputError(
                f"num_attention_heads {heads} is not a multiple of the {2 * kv_heads} kv heads of the sliding layers "
                f"(twice num_key_value_heads {kv_heads})"
            )
        return 2 * kv_heads if sliding else kv_heads
    if opt("grouped_kv", False):
        return int(opt("kv_heads") or heads)
    return 1 if opt("multi_query", False) else heads


def value_head_width(opt: Option, head_dims: list[int]) -> int:
    """The values' width per head where the spec reads one apart from head_dim (MiMo-V2-Flash's
    v_head_dim), 0 otherwise: the cache has one head size, so values are zero-padded to the key's
    width and the padded channels dropped before o_proj; a wider value cannot be padded."""
    width = int(opt("value_head_dim", 0) or 0)
    if width and any(width > d for d in head_dims):
        raise InputError(f"v_head_dim {width} is wider than head_dim {min(head_dims)}; the cache cannot hold it")
    return width


def conv_kernel(opt: Option, spec: ArchSpec, mixers: list[str]) -> int:
    """The short convolutions' kernel size K (LFM2's, Inkling's residual ones'; 0 when the model has none)."""
    if "short_conv" not in mixers and "residual_convs" not in mixers:
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
    beta_scale: float = 1.0  # 2 where the family lets beta reach 2 (MixerSpec.neg_eigval, OLMo-Hybrid)
    # the bounded forget gate's lower bound (MixerSpec.bounded_decay, Ling 3): g = bound * sigmoid(...)
    decay_bound: float | None = None
    gate: str = "silu"  # the gated norm's gate activation: silu or sigmoid (GatedDeltaNetNames.gate, resolved)

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
    doubled = spec.mixers is not None and spec.mixers.neg_eigval and bool(opt("linear_neg_eigval", False))
    bounded = spec.mixers is not None and spec.mixers.bounded_decay and bool(opt("linear_bounded_decay", True))
    bound = float(opt("linear_decay_bound", -5.0)) if bounded else None
    gate = spec.mixers.gated_deltanet.gate if spec.mixers is not None else "silu"
    if gate == "config":  # Qwen4-Exp: output_gate_type, else hidden_act, as its class reads them
        gate = str(opt("linear_output_gate", "silu"))
        if gate not in ("silu", "sigmoid"):
            raise InputError(f"{spec.name}'s gated-DeltaNet output gate '{gate}' is not silu or sigmoid")
    dims = DeltaNetDims(*values.values(), beta_scale=2.0 if doubled else 1.0, decay_bound=bound, gate=gate)
    if dims.value_heads % dims.key_heads:
        raise InputError(
            f"{spec.name}: {dims.value_heads} DeltaNet value heads do not divide among {dims.key_heads} key heads"
        )
    return dims


@dataclass(frozen=True)
class Mamba2Dims:
    """A Mamba2 layer's shapes (Granite-4.0-H's mamba layers, docs/hybrid-state.md §8.2): Hm heads
    of P channels (I = Hm P, the inner width), G groups of B and C of state size N (each group
    serves Hm / G consecutive heads), and the causal conv's kernel K over the x | B | C channels."""

    kernel: int
    heads: int
    head_dim: int
    groups: int
    state: int
    # the gated norm normalizes y, then multiplies by silu(z) (Falcon-H1's mamba_norm_before_gate);
    # else it normalizes y * silu(z) (Granite-4.0-H)
    norm_before_gate: bool = False
    # dt clamped to [floor, ceiling] in HF's chunked (prompt) form only (spec MixerSpec.prompt_dt_floor
    # and prompt_dt_limit); 0 and inf: no clamp
    prompt_dt_floor: float = 0.0
    prompt_dt_ceiling: float = float("inf")
    norm_eps: float | None = None  # the gated norm's own eps (MixerSpec.mamba2_norm_eps); None: the model's

    @property
    def prompt_clamped(self) -> bool:
        """Whether prompts clamp dt (the graph then computes whether a run is a prompt)."""
        return self.prompt_dt_floor > 0 or self.prompt_dt_ceiling < float("inf")

    @property
    def inner(self) -> int:
        """I: the width of x, z and the gated norm."""
        return self.heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """The convolved channels: x (I) and B and C (G N each)."""
        return self.inner + 2 * self.groups * self.state


def mamba2_dims(config: Any, opt: Option, spec: ArchSpec, mixers: list[str]) -> Mamba2Dims | None:
    """The Mamba2 shapes (None when the model has no such layer). mamba_d_head "auto" is
    expand * hidden / heads, as the config class resolves it. HF clamps dt with time_step_limit in
    its chunked (prompt) form only, not in its single-token step: a family whose spec names that
    limit (Granite-4.0-H, Falcon-H1) or a prompt-only floor (Nemotron-H's time_step_min) gets it read here and
    the graph applies it to prompt runs only, as HF does (docs/hybrid-state.md §8.2, §8.6); any
    other family refuses a limit other than (0, inf). The mixer's activation must be SiLU, the one
    the graph applies."""
    if "mamba2" not in mixers:
        return None
    activation = opt("mamba_activation", "silu")
    if activation != "silu":
        raise InputError(f"{spec.name}: Mamba2 activation '{activation}' is not exported (only silu)")
    heads, groups = int(opt("mamba_heads", 0) or 0), int(opt("mamba_groups", 1) or 1)
    head_dim = opt("mamba_head_dim", "auto")
    if head_dim in (None, "auto") and heads:
        head_dim = int(opt("mamba_expand", 2)) * int(config.hidden_size) // heads
    floor, ceiling = _prompt_dt_clamp(config, opt, spec)
    dims = Mamba2Dims(
        int(opt("mamba_conv_kernel", 0) or 0),
        heads,
        int(head_dim or 0),
        groups,
        int(opt("mamba_state", 0) or 0),
        norm_before_gate=bool(opt("mamba_norm_before_gate", False)),
        prompt_dt_floor=floor,
        prompt_dt_ceiling=ceiling,
        norm_eps=spec.mixers.mamba2_norm_eps if spec.mixers is not None else None,
    )
    if min(dims.kernel, dims.heads, dims.head_dim, dims.state) < 1:
        raise InputError(
            f"{spec.name} has Mamba2 layers but its config gives no mamba_n_heads/mamba_d_state/mamba_d_conv"
        )
    if dims.heads % dims.groups:
        raise InputError(f"{spec.name}: {dims.heads} Mamba2 heads do not divide among {dims.groups} groups")
    return dims


def _prompt_dt_clamp(config: Any, opt: Option, spec: ArchSpec) -> tuple[float, float]:
    """(floor, ceiling) of the prompt-only dt clamp: the spec's floor key and (min, max) limit key,
    as HF's mixer reads them; a time_step_limit the spec does not apply is refused when it clamps.
    Where the installed transformers changed which of the two its mixer reads
    (`prompt_dt_floor_until`, Nemotron-H), the one it reads (§8.6)."""
    mixers = spec.mixers
    floor_key = mixers.prompt_dt_floor if mixers is not None else None
    limit_key = mixers.prompt_dt_limit if mixers is not None else None
    until = mixers.prompt_dt_floor_until if mixers is not None else None
    if until is not None and transformers_version() >= until:
        floor_key = None  # the mixer clamps with the limit now, the floor key is not read
    floor = float(getattr(config, floor_key, None) or 0.0) if floor_key else 0.0
    if until is not None and floor_key is not None:
        return floor, float("inf")  # before `until` the mixer never reads the limit
    limit = getattr(config, limit_key, None) if limit_key else opt("mamba_dt_limit")
    if limit is None or (float(limit[0]) == 0.0 and float(limit[1]) == float("inf")):
        return floor, float("inf")
    low, high = float(limit[0]), float(limit[1])
    if limit_key is None:
        raise InputError(
            f"{spec.name}: time_step_limit {(low, high)} is not exported (HF clamps dt with it in prompts only)"
        )
    if not 0.0 <= low <= high:
        raise InputError(f"{spec.name}: time_step_limit {(low, high)} must be a range 0 <= min <= max; fix config.json")
    return max(floor, low), high


@dataclass(frozen=True)
class MambaDims:
    """A Mamba (v1) layer's shapes (Jamba's mamba layers, docs/hybrid-state.md §8.3): I channels
    (expand * hidden), each with its own state of N (B and C shared by every channel), dt's low rank
    R, and the causal conv's kernel K over the I channels of x."""

    kernel: int
    inner: int
    state: int
    dt_rank: int
    dt_bc_norm: str = "weighted"  # MixerSpec.mamba_dt_bc_norm: the norms on dt, B and C
    dt_bc_norm_eps: float = 0.0  # their eps where it is the mixer's own ("unit": mixer_rms_eps)
    heads: int = 1  # Zamba: heads with their own B and C (MambaNames.per_head)


def mamba_dims(opt: Option, spec: ArchSpec, mixers: list[str], hidden: int) -> MambaDims | None:
    """The Mamba shapes (None when the model has no such layer). mamba_dt_rank "auto" is
    ceil(hidden / 16), as the config class resolves it."""
    if "mamba" not in mixers:
        return None
    activation = opt("mamba_activation", "silu")
    if activation != "silu":  # the conv's and the gate's: the graph applies SiLU
        raise InputError(f"{spec.name}: Mamba activation '{activation}' is not exported (only silu)")
    rank = opt("mamba_dt_rank", "auto")
    rank = -(-hidden // 16) if rank in (None, "auto") else int(rank)
    norm = spec.mixers.mamba_dt_bc_norm if spec.mixers is not None else "weighted"
    # Mamba / Falcon-Mamba: the class's intermediate_size (expand * hidden unless config.json gives it:
    # falcon-mamba-7b spells expand 16 beside intermediate_size 2 * hidden, and the class takes the latter)
    inner = int(opt("mamba_inner", 0) or 0) or int(opt("mamba_expand", 0) or 0) * hidden
    dims = MambaDims(
        int(opt("mamba_conv_kernel", 0) or 0),
        inner,
        int(opt("mamba_state", 0) or 0),
        rank,
        norm,
        float(opt("mamba_norm_eps", 1e-6)) if norm == "unit" else 0.0,
        int(opt("mamba_heads", 1) or 1) if spec.mixers is not None and spec.mixers.mamba.per_head else 1,
    )
    if min(dims.kernel, dims.inner, dims.state, dims.dt_rank) < 1:
        raise InputError(
            f"{spec.name} has Mamba layers but its config gives no mamba_d_state/mamba_d_conv/mamba_expand/"
            "mamba_dt_rank"
        )
    if dims.inner % dims.heads:
        raise InputError(f"{spec.name}: {dims.inner} Mamba channels do not divide among {dims.heads} heads")
    return dims
