"""The sparse blocks' sizes and routing numerics, read from the config (model/dims.py asks when some
layer is sparse): expert counts and widths, the shared expert's width, the routing constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError


@dataclass(frozen=True)
class MoeDims:
    """The sparse blocks' sizes and routing numerics (shared by every sparse layer)."""

    experts: int
    top_k: int
    intermediate: int
    normalize: bool  # renormalize the top-k weights
    shared_intermediate: int = 0  # an always-on shared expert (Qwen2-MoE)
    alpha: float = 1.0  # gpt-oss clamped SwiGLU: gate * sigmoid(alpha * gate) * (up + 1)
    limit: float | None = None
    # activation "swiglu_limited" (Ling 3): each layer's limit for its routed / shared experts, by layer
    # index (0: none; graph/limited_swiglu.py)
    limits: tuple[float, ...] = ()
    shared_limits: tuple[float, ...] = ()
    jitter: float = 0.0  # PhiMoE sparsemixer threshold (router_jitter_noise, used in eval)
    routed_scaling: float = 1.0  # the routing weights' multiplier (routed_scaling_factor)
    groups: int = 1  # grouped routers: n_group expert groups, topk_group of them kept (graph/grouped_routing.py)
    groups_kept: int = 1
    norm_min: float = 0.0  # the renormalizing sum's floor (ERNIE-4.5-MoE's moe_norm_min)
    shared_average: bool = False  # (routed + shared) / 2 instead of their sum (Cohere2-MoE's "average")
    routing: str = "softmax"  # the spec's routing, or the one the config's expert_selection_fn selects
    # experts that return their input (LongCat-Flash's zero-computation experts): router columns
    # experts .. experts + zero_experts - 1, chosen beside the real ones (graph/zero_experts.py)
    zero_experts: int = 0
    router_softcap: float = 0.0  # logits -> c tanh(logits / c) before the sigmoid (Laguna); 0: none
    # activation "swiglu_softcapped" (Inkling2): softcap(gate, c_g) sigmoid(gate) softcap(up, c_u), (c_g, c_u)
    softcaps: tuple[float, float] = (0.0, 0.0)
    # the layers whose experts are the hash table's row of the token id (MoeSpec.hashed_kind, DeepSeek-V4)
    hashed: tuple[int, ...] = ()
    logit_scale: float = 1.0  # the router logits' multiplier (MoeSpec's config key router_logit_scale); 1: none


# the routed experts' SwiGLU with its halves clamped at swiglu_limit before the activation, as the MoE op clips:
# gpt-oss's (swiglu_clamped) and HunYuan-V4's plain silu(min(g, l)) * clip(u, -l, l) (swiglu_clipped)
LIMITED_BEFORE_ACTIVATION = ("swiglu_clamped", "swiglu_clipped")


def read_moe(opt: Any, spec: ArchSpec, intermediate: int) -> MoeDims | None:
    """The config's expert counts and routing numerics, for a family whose spec has experts and a
    config that turns them on (Gemma-4's enable_moe_block); read_dims asks only when some layer is
    sparse (a Jamba with one expert is dense throughout)."""
    if spec.moe is None or not opt("num_experts") or opt("enable_moe", True) is False:
        return None
    experts, top_k = int(opt("num_experts")), _uniform("num_experts_per_tok", opt("experts_per_token", 1))
    if spec.moe.routing == "sparsemixer":
        top_k = 2  # PhiMoE's sparsemixer routes two experts whatever num_experts_per_tok says
    if not 1 <= top_k <= experts + int(opt("zero_experts", 0) or 0):  # zero experts are chosen too
        raise InputError(f"num_experts_per_tok {top_k} must be between 1 and num_experts {experts}")
    limit = opt("swiglu_limit")
    if spec.moe.activation == "swiglu_clipped" and limit is not None and float(limit) <= 0:
        raise InputError(
            f"swiglu_limit {limit} <= 0: the class still clips the experts' SwiGLU at it (its config calls such a "
            "value no clip); export with a positive limit"
        )
    width = int(_set_width(opt("expert_intermediate_size"), spec.moe.expert_set) or intermediate)
    groups, kept = expert_groups(opt, spec, experts)
    shared = {
        "config": lambda: int(opt("shared_expert_intermediate_size", 0) or 0),
        "per_expert": lambda: width * int(opt("shared_experts", 0) or 0),
        "config_per_count": lambda: (
            int(opt("shared_expert_intermediate_size", 0) or 0) * int(opt("shared_experts", 0) or 0)
        ),
        "dense": lambda: intermediate,
    }[spec.moe.shared_width]
    norm = opt("norm_topk_prob", False)
    if norm not in (0, 1):  # DBRX's moe_normalize_expert_weights: the top-k weights over their p-norm
        raise InputError(f"the top-k weights renormalized by their {norm}-norm are not supported (1: their sum)")
    routing, normalize = spec.moe.routing, spec.moe.normalize or bool(norm)
    selection = opt("expert_selection")
    if spec.moe.selections and selection is not None:  # Cohere2-MoE: softmax or sigmoid of the top-k logits
        if selection not in spec.moe.selections:
            raise InputError(f"expert_selection_fn '{selection}' is not one of {', '.join(spec.moe.selections)}")
        routing = spec.moe.selections[selection]
        normalize = normalize if routing == spec.moe.routing else bool(norm)  # sigmoid: only by norm_topk_prob
    combination = opt("shared_combination", "sum")
    if combination not in ("sum", "average"):
        raise InputError(f"shared_expert_combination_strategy '{combination}' is not 'sum' or 'average'")
    return MoeDims(
        experts=experts,
        top_k=top_k,
        intermediate=width,
        # families that always renormalize say so in their spec; Qwen-MoE / OLMoE read norm_topk_prob
        normalize=normalize,
        shared_intermediate=shared() if spec.moe.names.shared_expert or spec.moe.names.shared_mlp else 0,
        alpha=float(opt("swiglu_alpha", 1.702 if spec.moe.activation == "swiglu_clamped" else 1.0)),
        limit=float(limit) if limit is not None and spec.moe.activation in LIMITED_BEFORE_ACTIVATION else None,
        jitter=float(opt("router_jitter", 0.0) or 0.0),
        routed_scaling=float(opt("routed_scaling", 1.0) or 1.0),
        groups=groups,
        groups_kept=kept,
        norm_min=float(opt("routing_norm_min", 0.0) or 0.0),
        shared_average=combination == "average",
        routing=routing,
        zero_experts=int(opt("zero_experts", 0) or 0),
        router_softcap=_router_softcap(opt, routing),
        limits=_limits(opt, spec, "expert_swiglu_limits"),
        shared_limits=_limits(opt, spec, "shared_swiglu_limits"),
        softcaps=(float(opt("expert_gate_softcap")), float(opt("expert_up_softcap")))
        if spec.moe.activation == "swiglu_softcapped"
        else (0.0, 0.0),
        hashed=_hashed_layers(opt, spec),
        logit_scale=float(opt("router_logit_scale", 1.0)),
    )


def _set_width(width: Any, expert_set: int | None) -> Any:
    """The expert width of the set the spec reads, where the config lists one per set (ERNIE-4.5-VL's
    moe_intermediate_size [text, vision]: the text experts' and, times the shared-expert count, the shared
    experts' width, as its MoE block builds them)."""
    if not isinstance(width, (list, tuple)):
        return width
    if expert_set is None or expert_set >= len(width):
        raise InputError(
            f"moe_intermediate_size {list(width)}: one width per expert set, which this family does not read"
        )
    return width[expert_set]


def _hashed_layers(opt: Any, spec: ArchSpec) -> tuple[int, ...]:
    """The layers whose mlp_layer_types entry is the spec's hashed kind (DeepSeek-V4's "hash_moe")."""
    if spec.moe is None or spec.moe.hashed_kind is None:
        return ()
    return tuple(i for i, kind in enumerate(opt("mlp_layer_types") or ()) if kind == spec.moe.hashed_kind)


def _limits(opt: Any, spec: ArchSpec, key: str) -> tuple[float, ...]:
    """A per-layer list of SwiGLU limits (activation "swiglu_limited"; 0 or none: no clipping)."""
    if spec.moe is None or spec.moe.activation != "swiglu_limited":
        return ()
    values = opt(key) or ()
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 for v in values):
        raise InputError(f"{spec.config_keys[key]} must hold one limit >= 0 per layer, got {list(values)}")
    return tuple(float(v) for v in values)


def clamped_swiglu(spec: ArchSpec) -> bool:
    """The family's experts compute gpt-oss's clamped SwiGLU: its constants are read even where no layer is
    sparse, since MiniMax-M3's dense MLPs compute it too (graph/activations.gated)."""
    return spec.moe is not None and spec.moe.activation == "swiglu_clamped"


def _router_softcap(opt: Any, routing: str) -> float:
    """The router logits' tanh softcap; computed for the routers chosen on sigmoid scores in the graph
    (graph/moe.py), refused for the others rather than dropped."""
    cap = float(opt("router_softcap", 0.0) or 0.0)
    if cap and routing not in ("sigmoid_topk", "sigmoid_biased"):
        raise InputError(f"a router logit softcap ({cap}) is not supported with {routing} routing")
    return cap


def _uniform(key: str, value: Any) -> int:
    """A per-layer list (HunYuan-MoE's moe_topk) that holds one value, as that value; a list that
    varies is refused: every sparse layer of the graph shares one top k."""
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise InputError(f"{key} varies by layer ({list(value)}); only one value for every layer is supported")
        value = value[0]
    return int(value)


# DeepSeek-V2's topk_method values: greedy (no groups) or group-limited greedy
TOPK_METHODS = ("greedy", "group_limited_greedy")


def expert_groups(opt: Any, spec: ArchSpec, experts: int) -> tuple[int, int]:
    """(groups, groups kept) of a grouped router; (1, 1) selects over every expert at once."""
    routing = spec.moe.routing if spec.moe is not None else None
    if routing == "softmax_group_limited":
        method = opt("expert_topk_method", "greedy")
        if method not in TOPK_METHODS:
            raise InputError(
                f"topk_method '{method}' is not one DeepSeek-V2's router computes ({', '.join(TOPK_METHODS)}); "
                "set one of them in config.json"
            )
        if method == "greedy":
            return 1, 1
    elif routing not in ("sigmoid_group_biased", "softmax_grouped"):
        return 1, 1
    groups, kept = int(opt("expert_groups", 1) or 1), int(opt("expert_groups_kept", 1) or 1)
    # V3's and Mistral-4's routers score a group by its two best experts (transformers fails too)
    least = 1 if routing == "softmax_group_limited" else 2
    if experts % groups or experts // groups < least or not 1 <= kept <= groups:
        raise InputError(
            f"n_group {groups} / topk_group {kept} do not split {experts} experts into groups of at least "
            f"{least}; check the config"
        )
    return groups, kept
