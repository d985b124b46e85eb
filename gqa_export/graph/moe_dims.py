"""The sparse blocks' sizes and routing numerics read from an HF config (`ModelDims.moe`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.latent_dims import expert_groups


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
    jitter: float = 0.0  # PhiMoE sparsemixer threshold (router_jitter_noise, used in eval)
    routed_scaling: float = 1.0  # the routing weights' multiplier (routed_scaling_factor)
    groups: int = 1  # grouped routers (DeepSeek): experts in n_group groups, topk_group of them kept
    groups_kept: int = 1


def read_moe(opt: Any, spec: ArchSpec, intermediate: int) -> MoeDims | None:
    """The config's expert counts and routing numerics, for a family whose spec has experts and a
    config that turns them on (Gemma-4's enable_moe_block); read_dims asks only when some layer is
    sparse (a Jamba with one expert is dense throughout)."""
    if spec.moe is None or not opt("num_experts") or opt("enable_moe", True) is False:
        return None
    experts, top_k = int(opt("num_experts")), int(opt("experts_per_token", 1))
    if spec.moe.routing == "sparsemixer":
        top_k = 2  # PhiMoE's sparsemixer routes two experts whatever num_experts_per_tok says
    if not 1 <= top_k <= experts:
        raise InputError(f"num_experts_per_tok {top_k} must be between 1 and num_experts {experts}")
    limit = opt("swiglu_limit")
    expert_width = int(opt("expert_intermediate_size") or intermediate)
    # a shared expert's width, or (DeepSeek) a count of experts' widths
    shared = int(opt("shared_expert_intermediate_size", 0) or opt("shared_expert_count", 0) * expert_width or 0)
    groups, kept = expert_groups(opt, spec, experts)
    return MoeDims(
        experts=experts,
        top_k=top_k,
        intermediate=expert_width,
        # families that always renormalize say so in their spec; Qwen-MoE / OLMoE read norm_topk_prob
        normalize=spec.moe.normalize or bool(opt("norm_topk_prob", False)),
        shared_intermediate=shared if spec.moe.names.shared_expert or spec.moe.names.shared_mlp else 0,
        alpha=float(opt("swiglu_alpha", 1.702 if spec.moe.activation == "swiglu_clamped" else 1.0)),
        limit=float(limit) if limit is not None and spec.moe.activation == "swiglu_clamped" else None,
        jitter=float(opt("router_jitter", 0.0) or 0.0),
        routed_scaling=float(opt("routed_scaling", 1.0) or 1.0),
        groups=groups,
        groups_kept=kept,
    )
