"""Module names of four residual-stream mechanisms (docs/gemma3n.md §1): alternating updates
(several parallel hidden streams, one of which a layer computes while a learned map predicts and
corrects the others), a learned low-rank augmented residual beside attention, hard-token
embedders that embed a range of special ids through their own small table (a multimodal
checkpoint's vision/audio control tokens), and two weight-shared layer stacks run in cycles over two
streams (HRM-Text); and the config keys of a fifth, the scaled residual taken after the norm
(MiniMax). Names are relative to the decoder root (model level) or to a layer, as `ArchSpec.tensor` /
`ArchSpec.layer_tensor` resolve them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlternatingUpdateNames:
    """AltUp: `streams` parallel hidden states [K, B, S, H]. Model level: the projections that
    spread the embedding into streams 1..K-1 and the ones that fold them back before the final norm.
    Layer level: a router (RMSNorm, scale 1/H, Linear H -> K, tanh), the prediction map (K -> K*K),
    the correction map (K -> K) and the output scale of the active stream fed to the per-layer input."""

    projections: str = "altup_projections.{k}"
    unembed_projections: str = "altup_unembed_projections.{k}"
    router_norm: str = "altup.router_norm"
    router: str = "altup.modality_router"
    prediction: str = "altup.prediction_coefs"
    correction: str = "altup.correction_coefs"
    output_scale: str = "altup.correct_output_scale"


@dataclass(frozen=True)
class HyperConnectionNames:
    """Hyper-connection residual streams without DeepSeek-V4's Sinkhorn mixing (HunYuan-V4; graph/hyper_connections.py):
    the residual is hc_mult copies [B, S, K, H]. Before each block a map of the flattened copies (`fn` [2K, K*H],
    times their inverse RMS) gives K `pre` weights (the block input, their weighted sum) and K `post` weights
    (the block output spread over the copies); `head` collapses the copies before the final norm. Layer modules
    `attention` / `mlp` hold `fn`, `scale` [2], `base` [2K] (stored without a suffix); the head,
    model level, holds `hc_fn`, `hc_scale` [1], `hc_base` [K]: `head` spellings, the first the checkpoint holds;
    no spelling (GLM-5-Next): the head is the copies' unweighted mean, no stored map.

    `form` "gated" is Qwen4-Exp's instead (graph/gated_hyper_connections.py): each module (`attention`, `mlp`, the
    single `head` spelling, model level) holds `hc_norm` [K*H] (a (1 + w) RMSNorm of each copy),
    `input_mix_weight_down` [r, K*H] and `input_mix_weight_up` [K*H, r] (the block input: the mean over copies of
    sigmoid(up(silu(down(normed) / K))) * normed) and, but the head, `block_inject_weight` [K, K*H] (each copy
    adds the block output times 2 sigmoid(inject(normed) / K))."""

    attention: str = "attn_hc"
    mlp: str = "ffn_hc"
    head: tuple[str, ...] = ("hc_head.hc_{leaf}", "hc_pre.hc_head.hc_head_{leaf}")
    # mapped (HunYuan-V4's fn / scale / base maps) | gated (Qwen4-Exp's low-rank mixer) | sinkhorn (DeepSeek-V4's
    # manifold-constrained maps: fn [(2 + K) K, K*H], scale [3], base [(2 + K) K] also give K x K `comb` weights,
    # softmax + eps then hc_sinkhorn_iters alternating column / row normalizations, and the copies become
    # comb^T copies + post * y; its post weights carry no eps)
    form: str = "mapped"


@dataclass(frozen=True)
class AugmentedResidualNames:
    """LAuReL: h_attn' = (h_attn + x + norm(right(left(x)))) / sqrt(2), x the layer's normed input."""

    left: str = "laurel.linear_left"
    right: str = "laurel.linear_right"
    norm: str = "laurel.post_laurel_norm"


@dataclass(frozen=True)
class HardTokenEmbedderNames:
    """Ids in [vocab_offset, vocab_offset + vocab_size) of a sub-config (`config_key`: vision_config,
    audio_config) are embedded as norm_post(projection(norm(table[id - vocab_offset]))) instead of the
    text table's row. `module` is relative to the checkpoint's model root (the decoder root without
    its `language_model.`)."""

    config_key: str
    module: str
    table: str = "embedding.weight"
    norm: str = "hard_embedding_norm.weight"
    projection: str = "embedding_projection.weight"


@dataclass(frozen=True)
class NormedResidualKeys:
    """Each block adds to its own normed input instead of the stream before the norm, both sides
    scaled by config constants: h = alpha * norm(h) + beta * block(norm(h)) (MiniMax's layers,
    docs/hybrid-state.md §8.16). The (alpha, beta) config keys of the full-attention block, of the
    recurrent-state mixer and of the MLP; a key the config lacks means 1."""

    attention: tuple[str, str] = ("full_attn_alpha_factor", "full_attn_beta_factor")
    state: tuple[str, str] = ("linear_attn_alpha_factor", "linear_attn_beta_factor")
    mlp: tuple[str, str] = ("mlp_alpha_factor", "mlp_beta_factor")


@dataclass(frozen=True)
class RecurrentStackNames:
    """Two weight-shared stacks of `num_layers_per_stack` layers, a low (L) and a high (H) one, run
    H_cycles x (L_cycles + 1) times over two streams (graph/recurrent_stacks.py): per high cycle
    z_L = L(z_L + z_H) L_cycles times, then z_H = H(z_H + z_L); z_L starts from the stored `low_init`
    vector, z_H from the scaled embeddings, and z_H feeds the lm_head. Each invocation of a stored layer
    is its own graph layer with its own KV cache (the config counts them in num_hidden_layers); the
    layer prefixes name the stored layers of each stack (`{i}`: the index inside the stack)."""

    low: str = "L_module.layers.{i}."
    high: str = "H_module.layers.{i}."
    low_init: str = "z_L_init"
