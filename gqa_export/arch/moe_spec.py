"""The sparse block half of an architecture spec: where a mixture of experts' tensors live
(`MoeNames`, the spellings tried in order) and how its router computes (`MoeSpec`). An `ArchSpec`
(arch/spec.py) carries one as its `moe`; graph/moe.py and model/moe.py read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

PER_EXPERT_PROJ = ("experts.{e}.gate_proj", "experts.{e}.up_proj", "experts.{e}.down_proj")
PER_EXPERT_W = ("experts.{e}.w1", "experts.{e}.w3", "experts.{e}.w2")  # Mixtral / PhiMoE hub names: gate, up, down
FUSED_EXPERTS = ("experts.gate_up_proj", "experts.down_proj")  # transformers 5.x: [E, 2I, H] halves, [E, H, I]


@dataclass(frozen=True)
class MoeNames:
    """Where a sparse block's tensors live, relative to the layer; each tuple lists the spellings
    tried in order (the hub's per-expert names and transformers 5.x's fused ones both occur)."""

    blocks: tuple[str, ...] = ("mlp.",)  # module prefixes of the sparse block
    routers: tuple[str, ...] = ("gate",)  # the router Linear [E, H] (+ bias) inside the block
    per_expert: tuple[tuple[str, str, str], ...] = (PER_EXPERT_PROJ,)
    fused: tuple[tuple[str, str], ...] = (FUSED_EXPERTS,)
    transposed: tuple[str, str] | None = None  # gpt-oss: gate_up [E, H, 2I] interleaved, down [E, I, H] (+ _bias)
    stacked_rows: tuple[str, str, str] | None = None  # DBRX: gate, up, down each [E*I, H] (down stored (in, out))
    # how a transposed gate_up orders its 2I columns: "interleaved" (gpt-oss: gate_j, up_j pairs) or
    # "halves" ([gate | up], Llama-4's experts.gate_up_proj)
    transposed_order: str = "interleaved"
    # the fused names hold either [E, 2I, H] / [E, H, I] or, transposed, [E, H, 2I] [gate | up] halves /
    # [E, I, H], and the stored shape says which, as transformers' loader decides (Qwen3-VL-MoE: the hub
    # stores them transposed, transformers 5.x saves them untransposed)
    fused_or_transposed: bool = False
    shared_expert: str | None = None  # a dense gated MLP run for every token (Qwen2-MoE)
    shared_gate: str | None = None  # its sigmoid gate Linear [1, H]
    # a per-expert bias added to the scores only to select (LFM2-MoE); "a|b": the spellings tried in order
    expert_bias: str | None = None
    # an ungated dense MLP at the layer run beside the experts: (packed gate | up, down) (Granite-4.0-H's shared_mlp)
    shared_mlp: tuple[str, str] | None = None
    output_bias: str | None = None  # a bias [H] added to the block's output (JetMoE's mlp.bias)
    # ungated experts (MoeSpec activation "ungated"): (up, down) spellings tried in order, a per-expert
    # Linear template with {e} ([I, D] / [D, I]) or a stacked tensor ([E, I, D] / [E, D, I])
    ungated: tuple[tuple[str, str], ...] = ()
    # projections into and out of a narrower width D the experts run in (in, out), where the checkpoint has them
    latent: tuple[str, str] | None = None
    # a norm of the family's kind on the pooled input (after latent[0]), at the config's norm eps (Muse-Spark's
    # pre_expert_norm; graph/pooled_experts.py)
    latent_norm: str | None = None
    # a norm over the block's whole output (routed + shared experts) before the residual add, on sparse layers only
    # (A.X-K1's post_mlp_layernorm, stored at the layer on the hub and under mlp. by transformers); "a|b": the
    # spellings tried in order, relative to the layer
    output_norm: str | None = None
    # a learned RMSNorm per routed expert on its output before the weighted sum, [E, H] relative to the block
    # (Ergo's experts.post_expert_norm; graph/normed_experts.py), and the shared expert's own RMSNorm on its
    # output, relative to the shared expert (Ergo's shared_experts.norm)
    expert_norm: str | None = None
    shared_expert_norm: str | None = None
    # a learned scalar multiplying every routing weight (Inkling's gate.global_scale, routing "sigmoid_shared_sink")
    router_scale: str | None = None
    # a frozen token id -> expert ids table [vocab, k] relative to the block (DeepSeek-V4's gate.tid2eid): on the
    # layers MoeSpec.hashed_kind marks, the experts are its row of the token's id, not the top k of the scores
    hash_table: str | None = None


@dataclass(frozen=True)
class MoeSpec:
    """A family's sparse block.

    routing: "softmax" (softmax over all experts, top-k, renormalized when `normalize` or the
    config's norm_topk_prob says so; top-k-then-softmax routers are this with normalize),
    "sparsemixer" (PhiMoE's top-2 in eval mode), "normed_residual" (Gemma-4: scaleless RMSNorm of the residual,
    scale, softmax, top-k renormalized, per-expert scales), "sigmoid_biased" (LFM2-MoE: sigmoid scores,
    the top k chosen on scores + expert_bias, weighted by the unbiased scores, renormalized when
    norm_topk_prob, times routed_scaling_factor), "softmax_group_limited" (softmax over every expert;
    with topk_method group_limited_greedy only the topk_group groups of the highest per-group maximum
    keep their scores; the top k of those, never renormalized, times routed_scaling_factor),
    "sigmoid_group_biased" (DeepSeek-V3, GLM-4-MoE: sigmoid scores; groups ranked by the sum of their
    two best biased scores, the top k of the biased scores within the topk_group best groups,
    weighted by the unbiased scores, renormalized (+1e-20) when norm_topk_prob, times
    routed_scaling_factor), "softmax_grouped" (Mistral-4: that group choice on softmax probabilities without a
    bias, the outside groups' probabilities set to 0, renormalized (+1e-20) when norm_topk_prob, times
    routed_scaling_factor), "softmax_biased" (ERNIE-4.5-MoE: softmax over all experts, the top k
    chosen on probs + expert_bias, weighted by the unbiased probs, always renormalized by max(sum,
    moe_norm_min)), "sigmoid_scaled_input" (Llama-4: the top k of the logits, each chosen expert's
    *input* scaled by sigmoid(its logit) and the expert outputs summed unweighted; through a
    SiLU-gated expert that is not the output scaled, graph/input_scaled_experts.py), "sigmoid_topk"
    (Cohere2-MoE's sigmoid selection: the top k of the logits weighted by their sigmoid, renormalized
    by the sum alone when normalized; MiniMax-M2 and AFMoE choose on sigmoid + the selection bias their
    checkpoints hold, `expert_bias`), "sigmoid_logits_biased" (Kolibri-1: the top k of the logits + the
    selection bias, weighted by the sigmoid of their logits, renormalized by their sum when
    norm_topk_prob), "sigmoid_shared_sink" (Inkling: the router's last Ns rows score the shared experts;
    the top k routed of sigmoid + the selection bias and the Ns shared experts weighted together, each
    sigmoid over their sum, times routed_scaling_factor and `router_scale`; graph/shared_sink_routing.py),
    "sqrtsoftplus_biased" (DeepSeek-V4: scores sqrt(softplus(logits)), the top k of
    scores + the selection bias, or the hash table's row on hashed layers, weighted by the scores over
    their sum + 1e-20, times routed_scaling_factor). Routers other
    than softmax are computed as dense weights (graph/moe.py).
    shared_width: the shared expert's width, "config" (shared_expert_intermediate_size), "per_expert"
    (the experts' width times the config's shared-expert count: DeepSeek, GLM-4-MoE, ERNIE-4.5-MoE)
    "config_per_count" (shared_expert_intermediate_size times the shared-expert count: dots3-note)
    or "dense" (intermediate_size: HunYuan-MoE's shared_mlp). activation: "swiglu" (silu(gate) * up),
    "swiglu_clamped" (gpt-oss: gate * sigmoid(alpha gate) * (up + 1), clamped at the limit),
    "swiglu_clipped" (HunYuan-V4's routed experts: silu(min(gate, l)) * clip(up, -l, l), l the config's
    swiglu_limit: the MoE op's own clip; its shared expert and dense MLPs plain SwiGLU),
    "swiglu_limited" (Ling 3: min(silu(gate), l) * clip(up, -l, l), l the layer's entry of the config's
    per-layer limits for routed and for shared experts, 0: none; graph/limited_swiglu.py),
    "geglu" (gelu_tanh(gate) * up; no fused CPU kernel: plain ops), "ungated" (down(act(up x)) with the
    config's hidden activation, a shared expert of the same form; plain ops, since no MoE kernel has
    squared ReLU: graph/ungated_experts.py). layer_type: the layer type whose layers are sparse (every
    other layer has none); None: the config's sparse-step keys decide (model/layer_kinds.py).
    router_dtype: None (the router computes in the export dtype) or "float32" (the family's router
    computes its logits and its choice in fp32 whatever the model's dtype, its weight and selection
    bias kept fp32: an fp16 / bf16 package does the same and casts the routing weights back, since
    fp16 rounding of near-tied scores changes which experts are chosen, docs/moe.md §8.3)."""

    names: MoeNames = field(default_factory=MoeNames)
    routing: str = "softmax"
    normalize: bool = False
    activation: str = "swiglu"
    shared_width: str = "config"
    router_dtype: str | None = None
    layer_type: str | None = None
    # a shortcut-connected block (LongCat-Flash, with ArchSpec.sublayers 2): the first sublayer of a
    # pair runs it on its post-attention normed input beside the dense MLP, and its output is added to
    # the residual at the end of the second sublayer (graph/shortcut_moe.py)
    shortcut: bool = False
    # the config's expert_selection_fn value -> the routing it selects (Cohere2-MoE); empty: `routing`
    selections: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # mlp_layer_types values besides "sparse" that mark a sparse layer (DeepSeek-V4's "moe" / "hash_moe"), and the
    # one whose layers choose their experts by the token id (MoeNames.hash_table)
    sparse_kinds: tuple[str, ...] = ()
    hashed_kind: str | None = None
    # the shared expert's SwiGLU (and any dense MLP's) clipped as the routed one's: silu(min(g, l)) * clip(u, -l, l)
    # (DeepSeek-V4, whose layers are all sparse; GLM-5-Next's dense layers too)
    shared_clipped: bool = False
    # the dense MLPs' SwiGLU clipped at their layer's shared-expert limit, as activation "swiglu_limited" clips the
    # shared expert's: min(silu(g), l) * clip(u, -l, l) (Step3p7's MLP class, dense or shared; Ling 3's dense
    # MLPs are unclipped)
    dense_limited: bool = False
    # where the config's expert width is a list, one per expert set of each sparse layer (ERNIE-4.5-VL's
    # moe_intermediate_size [text, vision]): the entry of the set the spec's names read (None: a list is refused)
    expert_set: int | None = None
    # how MoeNames.expert_norm is held and applied: "per_expert" (a learned RMSNorm per expert [E, H], Ergo's,
    # graph/normed_experts.py) or "shared_input_scaled" (one [D] weight for every expert: each expert's output times
    # (norm_offset + w), then a weightless RMSNorm at the post-block norms' eps; Muse-Spark's, graph/pooled_experts.py)
    expert_norm_form: str = "per_expert"
    # the config keys that place the sparse layers which the family's HF class reads, by their option names
    # (model/layer_kinds.py's sparse_layer: "mlp_layer_types", "expert_layer_period", "sparse_layers",
    # "first_dense_layers", "last_sparse_layer", "decoder_sparse_step", "mlp_only_layers"); a key of another
    # family's rule that a config carries unread is ignored, as transformers ignores it. None: every rule
    layer_rules: tuple[str, ...] | None = None
