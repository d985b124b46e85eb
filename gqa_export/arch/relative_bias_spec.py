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
