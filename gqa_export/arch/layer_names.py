"""The module names inside one decoder layer, as data: the attention, MLP and norm names of a layer
(`LayerNames`), Gemma-3n's per-layer inputs and the latent-attention projections. arch/spec.py's
ArchSpec holds them; the families import them from there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerNames:
    """Module names inside one decoder layer (relative to `ArchSpec.layer_prefix`).

    Linear modules are given without the `.weight` / `.bias` suffix. `qkv` / `gate_up` name a
    fused projection (Phi-3) used instead of q/k/v or gate/up; norms set to None do not exist.
    The per-layer-input modules and `layer_scalar` are Gemma-4's; a layer uses them when the
    checkpoint holds them.
    """

    input_norm: str | None = "input_layernorm"
    post_attention_norm: str | None = "post_attention_layernorm"
    pre_feedforward_norm: str | None = None
    post_feedforward_norm: str | None = None
    q: str = "self_attn.q_proj"
    k: str = "self_attn.k_proj"
    v: str = "self_attn.v_proj"
    o: str = "self_attn.o_proj"
    qkv: str | None = None
    q_norm: str | None = None
    k_norm: str | None = None
    gate: str = "mlp.gate_proj"
    up: str = "mlp.up_proj"
    down: str = "mlp.down_proj"
    gate_up: str | None = None
    per_layer_gate: str | None = None
    per_layer_projection: str | None = None
    per_layer_norm: str | None = None
    layer_scalar: str | None = None  # a stored scalar that multiplies the residual stream at the end
    act_params: str = "mlp.act_fn"  # a learned activation's tensors (Apertus' xIELU alpha_p/alpha_n/beta/eps)
    # Gemma-4's MoE layers: the expert branch's own norms next to the dense MLP's
    pre_feedforward_norm_2: str | None = None
    post_feedforward_norm_1: str | None = None
    post_feedforward_norm_2: str | None = None
    # a parallel layer's own norms of the residual for attention and for the MLP, used instead of
    # input_norm where the checkpoint holds them (Falcon-40B's ln_attn / ln_mlp; Falcon-7B has one)
    parallel_norms: tuple[str, str] | None = None
    # a Linear of the layer's normed input whose activation gates the attention output before o_proj,
    # where the checkpoint holds it: [Nq*D, H] per channel (AFMoE's self_attn.gate_proj; Qwen3.5's gate
    # sits in q_proj) or [Nq, H] per head (Laguna's, LFM3's, Ling 3's and dots3-note's g_proj)
    output_gate: str | None = None
    # a per-head bias [Nq] added to a per-channel output gate before its activation, broadcast over each
    # head's D channels, where the checkpoint holds it (Beam's self_attn.gate_bias)
    output_gate_bias: str | None = None
    # norms inside the blocks, applied where the spec names them (the checkpoint must hold them): one
    # over the attention output before o_proj, one over act(gate) * up before down_proj (BitNet's
    # self_attn.attn_sub_norm and mlp.ffn_sub_norm)
    attention_output_norm: str | None = None
    mlp_inner_norm: str | None = None
    # per-channel weights multiplying the residual stream before the attention's and the MLP's add (Doge's
    # input_residual, post_attention_residual)
    residual_scales: tuple[str, str] | None = None
    # an affine map on each residual add, (block + b) * s + (residual + b') * s' (ZAYA's
    # post_attention_residual_scale, post_mlp_residual_scale; graph/affine_residual.py)
    affine_residuals: tuple[str, str] | None = None
    # a learned per-channel gate on each residual add, sigmoid(w) x block + sqrt(1 - sigmoid(w)^2) x residual
    # (Ergo's attention_residual_gate, feedforward_residual_gate; Muse-Spark's on w / T with a floor, their module's
    # tensor `gate`; graph/learned_residual_gate.py)
    residual_gates: tuple[str, str] | None = None
    # norms with a low-rank input-dependent gate, where the checkpoint holds them: (inner, down, up) relative
    # to the norm, y * sigmoid(up(silu(down(y)))) with y = the RMSNorm "{norm}.{inner}" (A.X-K2's
    # GatedRMSNorm, graph/gated_norm.py); a norm stored plain is read plain
    gated_norms: tuple[str, str, str] | None = None
    # a stored scalar multiplying the dense MLP's output, where the checkpoint holds it (Inkling's mlp.global_scale)
    mlp_output_scale: str | None = None


@dataclass(frozen=True)
class PerLayerInputNames:
    """Model-level tensors of per-layer embeddings (Gemma-4 PLE), relative to the decoder root."""

    table: str = "embed_tokens_per_layer.weight"
    projection: str = "per_layer_model_projection.weight"
    norm: str = "per_layer_projection_norm.weight"


@dataclass(frozen=True)
class LatentAttentionNames:
    """A multi-head latent attention block's modules (DeepSeek-V2/V3), relative to the layer: the
    query from q_proj, or through a low-rank pair q_a (+ its RMSNorm) then q_b when the config has a
    q_lora_rank; kv_a gives the compressed latent (kv_lora_rank) and one decoupled rope key shared by
    every head; kv_b expands the normed latent into each head's no-rope key and value
    (docs/latent-attention.md)."""

    q: str = "self_attn.q_proj"
    q_a: str = "self_attn.q_a_proj"
    q_a_norm: str = "self_attn.q_a_layernorm"
    q_b: str = "self_attn.q_b_proj"
    kv_a: str = "self_attn.kv_a_proj_with_mqa"
    kv_a_norm: str = "self_attn.kv_a_layernorm"
    kv_b: str = "self_attn.kv_b_proj"
    # dots3-note: an RMSNorm on the shared rope key before RoPE; None: none (every other family). Its
    # per-head output gate is LayerNames.output_gate, as Ling 3's
    rope_key_norm: str | None = None
    # the latent norms at the config's rms_norm_eps (dots3-note), else their module default 1e-6
    config_norm_eps: bool = False
    # what q_b reads, concatenated in this order: "normed" q_a_norm(q_a) (every family) and "raw" q_a (A.X-K2,
    # whose q_b is 2 x q_lora_rank wide)
    q_b_input: tuple[str, ...] = ("normed",)
    # q_b yields per head [query | gate (v_head_dim)], the gate's activation (output_gate_activation) scaling each
    # value channel of the attention output before o_proj (A.X-K2; graph/latent_attention.latent_output)
    value_gate: bool = False
    # the same per-value-channel gate from a Linear of the layer's normed input [N*v_head_dim] (HunYuan-V4's
    # self_attn.gate_proj) instead of from q_b
    value_gate_proj: str | None = None
    # Mistral-Large-4: each head's query (after RoPE) times scale_h * log(pos + 1) + bias_h, the module's per-head
    # `scale` and `bias` (MistralLarge4TextSoftmaxScaling); None: none
    query_log_scale: str | None = None
    # Mistral-Large-4: the inverse rope frequencies times exp(alpha) of this decoder-level tensor (LeRoPE's learned
    # per-frequency scale, rotary_emb.alpha); None: the config's frequencies as they are
    rope_frequency_scale: str | None = None


@dataclass(frozen=True)
class SharedKvAttentionNames:
    """An attention block whose one KV head is both key and value (DeepSeek-V4; graph/shared_kv_attention.py),
    relative to the layer: the query through a low-rank pair q_a (+ its RMSNorm) then q_b, a weightless
    RMSNorm per head; kv (+ its RMSNorm) the single [head_dim] key = value; RoPE on each head's trailing
    channels and the output's rotated back; the output projected per head group (o_a, block-diagonal,
    [groups * o_lora_rank, heads * head_dim / groups]) then mixed by o_b."""

    q_a: str = "self_attn.q_a_proj"
    q_a_norm: str = "self_attn.q_a_norm"
    q_b: str = "self_attn.q_b_proj"
    kv: str = "self_attn.kv_proj"
    kv_norm: str = "self_attn.kv_norm"
    o_a: str = "self_attn.o_a_proj"
    o_b: str = "self_attn.o_b_proj"
    # the compressed-KV layers' compressor: kv_proj / gate_proj (width head_dim, or 2 x head_dim for two window
    # series), position_bias [compress_rate, width], kv_norm (graph/compressed_kv.py)
    compressor: str = "self_attn.compressor"
