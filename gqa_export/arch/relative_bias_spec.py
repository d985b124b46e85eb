"""Module names of two attention-side mechanisms (docs/coverage.md, Inkling): a relative position bias
computed per query and head from the layer's input, and residual short convolutions, each with a
conv state carried beside the KV cache. An `ArchSpec` (arch/spec.py) carries them as its
`relative_bias` and `residual_convs`; names are relative to the layer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RelativeBiasNames:
    """A relative position bias per query and head: `r_proj` [Nq * d_rel, H] gives each token's relative
    states [Nq, d_rel], which times the learned bank `bank` [d_rel, extent] give one logit per backward
    distance 0 .. extent - 1, added to that key's score (zero past the extent). `extent`: the config key of
    the full layers' extent (a sliding layer's is its window); `log_floor` / `log_alpha`: the config keys
    of the full layers' log scaling (queries and bias times 1 + alpha log(max((pos + 1) / floor, 1)) from
    position floor on; none where the floor is unset) (graph/relative_bias.py)."""

    r_proj: str = "self_attn.r_proj"
    bank: str = "self_attn.rel_logits_proj.proj"
    width: str = "d_rel"
    extent: str = "rel_extent"
    log_floor: str = "log_scaling_n_floor"
    log_alpha: str = "log_scaling_alpha"
    # Inkling2's clipped attention (graph/clipped_attention.py); None: Inkling's q/k RMSNorms, no sinks
    clipped: ClippedAttentionNames | None = None


@dataclass(frozen=True)
class ClippedAttentionNames:
    """Inkling2's attention inputs: queries times a learned [Nq, D] scale, keys as they are and the relative states
    times a learned [Nq, d_rel] scale, each head vector L2-clipped (scaled down to the config's threshold where
    longer; the full layers' queries and relative states then log-scaled), values RMS-normed without a weight; a
    sink logit per token and head (`sink`, zero value); the full layers' keys and values convolved with taps
    `static_weight` [K, C] plus `weight_proj`(their input) [Nkv K] per token (`key_taps`, `value_taps`)."""

    query_scale: str = "self_attn.q_proj.norm.scale"
    relative_scale: str = "self_attn.relative_position_bias.norm.scale"
    clip: str = "qk_l2_clip_threshold"
    relative_clip: str = "rel_l2_clip_threshold"
    sink: str = "self_attn.sink_proj"
    key_taps: str = "self_attn.k_proj.sconv"
    value_taps: str = "self_attn.v_proj.sconv"


@dataclass(frozen=True)
class BlockResidualNames:
    """Inkling2's block attention residuals (graph/block_residuals.py): every `block_size` layers the layer input
    joins a stack of block states; each layer's attention input (a full layer's three: queries', keys' and values',
    each then normed by its own `input_norms`), its MLP input and the final norm's input are an attention of learned
    queries over the weightless-RMS-normed stack and the running partial sum."""

    attention: str = "attention_input.query"
    mlp: str = "mlp_input.query"
    final: str = "final_input.query"
    input_norms: tuple[str, str, str] = ("q_input_layernorm", "k_input_layernorm", "v_input_layernorm")
    block_size: str = "n_layers_per_attn_res_block"
    # Inkling2-Loop's messages between loop passes (graph/loop_messages.py); None: no loop messages
    messages: LoopMessageNames | None = None


@dataclass(frozen=True)
class LoopMessageNames:
    """Inkling2-Loop's messages: each pass after the first reads, per loop layer, four messages (its queries', keys',
    values' and MLP inputs') attended by learned queries `query` [loop layers, 4, H] (model-level) over the previous
    pass's block states and its output; each joins its input through a gate (`gates`, per layer): `down`
    [r, 2H] of the weightless-RMS-normed input and message, then (1 - tanh(`forget` .)) input + tanh(`message` .)
    message, in float32. `stored_queries`: the serving layout's two [2 loop layers, H] tensors the queries are read
    from where the checkpoint holds them (model-level: each loop layer's query and MLP queries, then its key and value
    queries; source/stored_renames.py merges them as transformers' Inkling2LoopMergeMessageQueries does)."""

    query: str = "message_input.query"
    stored_queries: tuple[str, str] = ("middle_cycle_cross_pass_queries", "middle_cycle_cross_pass_kv_queries")
    gates: tuple[str, str, str, str] = ("q_message_gate", "k_message_gate", "v_message_gate", "mlp_message_gate")
    down: str = "down_proj"
    forget: str = "forget_gate_proj"
    message: str = "message_gate_proj"


@dataclass(frozen=True)
class ResidualConvNames:
    """Causal depthwise convolutions added to their own input (y = x + conv(x), in float32): on the key and
    value projections before the key norm and the cache, on the attention output after o_proj and on the MLP
    output, each a Conv1d [C, 1, K] (K: the config's conv_kernel key; graph/residual_convs.py). genai 0.18 binds two
    states per layer beside a KV cache (its RecurrentState), so the keys' and values' states share the conv
    state, the attention output's and the MLP output's the recurrent one (docs/coverage.md, Inkling)."""

    key: str = "self_attn.k_sconv.conv1d"
    value: str = "self_attn.v_sconv.conv1d"
    attention: str = "attn_sconv.conv1d"
    mlp: str = "mlp_sconv.conv1d"
    scaled: bool = False  # Inkling2: the sum over sqrt(K + 1) (per-token taps: sqrt(2K + 1))
