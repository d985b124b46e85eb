"""Model dimensions and features read from an HF config, in one typed object.

Per-layer attention (window, which rope table) comes from `layer_types` where the config has it
(transformers v5 normalizes it for Qwen2/3, Gemma-2/3, SmolLM3), else a `sliding_window` applies
to every layer (Mistral, Phi-3). Both rope spellings are read: v5 `rope_parameters` (flat, or one
dict per layer type for Gemma-3) and v4 `rope_scaling` + `rope_theta` (the official builder
crashed on configs for exactly this, ORT GenAI PR #2609).

Shapes are per layer: transformers >= 5.2x exposes Gemma-4's per-layer head_dim / kv heads only
through `config.per_layer_config[i]` (global access raises), so they are read there; KV-shared
layers point at the layer whose cache they read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gqa_export.arch.spec import ArchSpec
from gqa_export.arch.wrapped_decoders import LM_HEAD_ONLY
from gqa_export.errors import InputError
from gqa_export.model import config_reads
from gqa_export.model.alibi import alibi_slopes
from gqa_export.model.class_reads import class_read, stray_refusals, unread_keys
from gqa_export.model.config_reads import config_get, first_id, layer_config, placeholder_ids, token_ids
from gqa_export.model.latent import LatentDims, latent_scale, model_latent
from gqa_export.model.layer_dims import LayerDims, read_layers
from gqa_export.model.layer_kinds import (
    DeltaNetDims,
    Mamba2Dims,
    MambaDims,
    conv_kernel,
    deltanet_dims,
    mamba2_dims,
    mamba_dims,
    query_temperature,
    value_head_width,
)
from gqa_export.model.layer_ropes import (
    layer_ropes,
    position_query_scale_params,
    projected_head_dim,
)
from gqa_export.model.moe import MoeDims, clamped_swiglu, read_moe
from gqa_export.model.multipliers import Resolved, embedding_multiplier, residual_multiplier, resolve_multipliers
from gqa_export.model.ngpt import NgptDims, ngpt_dims
from gqa_export.model.recurrent_loop import RecurrentLoopDims, recurrent_loop_dims, unrolled_layers
from gqa_export.model.relative_bias import RelativeBiasDims, relative_bias_dims
from gqa_export.model.rglru import RgLruDims, rglru_dims
from gqa_export.model.rope import RopeConfig
from gqa_export.model.rwkv import RwkvDims, rwkv_dims
from gqa_export.model.shared_kv import SharedKvDims, shared_kv_dims
from gqa_export.model.sparse_cap import block_sparse_cap, qsa_cap
from gqa_export.model.stream import (
    AltUpDims,
    HardTokenRange,
    HyperDims,
    RecurrentStackDims,
    altup_dims,
    hard_token_ranges,
    hyper_dims,
    normed_residual_factors,
    recurrent_stack_dims,
)
from gqa_export.model.xlstm import MlstmDims, mlstm_dims


@dataclass(frozen=True)
class ModelDims:
    model_type: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_heads: int
    vocab_size: int
    rms_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str
    ropes: dict[str, RopeConfig]
    layers: tuple[LayerDims, ...]
    attention_scale: float | None  # None: per layer, head_dim ** -0.5
    attn_softcap: float
    final_softcap: float
    embedding_multiplier: float
    residual_multiplier: float
    logits_divisor: float
    norm_offset: float
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    # the model config's own pad_token_id (its modules' padding_idx: fairseq positions' zero row and first
    # position), which a generation_config's pad_token_id does not change
    padding_idx: int | None = None
    per_layer_input_size: int = 0  # Gemma-4 PLE width per layer (0: no per-layer inputs)
    placeholder_ids: tuple[int, ...] = ()  # multimodal placeholders embedded as pad_token_id (Gemma-4)
    placeholder_row: int | None = None  # the id they embed as: padding_idx, or the spec's (Kimi-K2.5: 0)
    query_scale: tuple[float, int] | None = None  # (beta, length): q *= 1 + beta*log(1 + floor(pos/length))
    moe: MoeDims | None = None
    norm_kind: str = "rms"  # the spec's norm: rms | layer | layer_free | rms_free
    parallel: bool = False  # attention and MLP off one norm, both added (spec layout or its config flag)
    logits_multiplier: float = 1.0  # Cohere's logit_scale
    clip_qkv: float | None = None  # q, k, v clamped to +-clip after their norms (OLMoE)
    # the embedding multiplier belongs to the embedding module (transformers 5.x Gemma's
    # ScaledWordEmbedding), so inputs_embeds arrive scaled; else (Granite) the model scales them
    embedding_scaled_in_table: bool = False
    head_act: str | None = None  # the activation of ArchSpec.head_transform
    conv_kernel: int = 0  # short-conv layers' kernel K (their state keeps the last K - 1 inputs)
    deltanet: DeltaNetDims | None = None  # gated-DeltaNet layers' shapes (Qwen3.5)
    mamba2: Mamba2Dims | None = None  # Mamba2 layers' shapes (Granite-4.0-H)
    mamba: MambaDims | None = None  # Mamba (v1) layers' shapes (Jamba)
    rglru: RgLruDims | None = None  # RG-LRU layers' shapes (RecurrentGemma)
    rwkv: RwkvDims | None = None  # RWKV-4 blocks' time-mix width and rescaling (model/rwkv.py)
    mlstm: MlstmDims | None = None  # xLSTM's mLSTM heads and gates (model/xlstm.py)
    # compressed convolutional attention's two q|k kernels (cca_time0 depthwise, cca_time1 grouped); (0, 0): none
    cca_kernels: tuple[int, int] = (0, 0)
    # Linear inputs/outputs scaled by config constants: (module, side) -> segments (model/multipliers.py)
    multipliers: Resolved = field(default_factory=dict)
    latent: LatentDims | None = None  # multi-head latent attention (DeepSeek-V2/V3)
    alibi: tuple[float, ...] = ()  # ALiBi slopes per query head (Bloom, MPT): standard Attention adds the bias
    altup: AltUpDims | None = None  # alternating updates over parallel streams (graph/altup.py)
    hyper: HyperDims | None = None  # hyper-connection residual copies (graph/hyper_connections.py)
    shared_kv: SharedKvDims | None = None  # one KV head as key and value, grouped output (graph/shared_kv_attention.py)
    per_layer_vocab: int = 0  # the per-layer table's rows; ids past it read row 0
    hard_tokens: tuple[HardTokenRange, ...] = ()  # special-id ranges with their own embedders
    scaleless_qk_norm: bool = False  # q/k RMSNorm without weight over head_dim (spec qk_norm "scaleless")
    nope_query_scale: tuple[float, int] | None = None  # (beta, length) of query_scale at pos + 1, NoPE layers
    nope_query_power: tuple[float, int] | None = None  # (exponent, length): NoPE q *= (1 + (pos+1)/length)**exponent
    value_head_dim: int = 0  # values narrower than head_dim, zero-padded in the cache (MiMo-V2-Flash); 0: as wide
    # (alpha, beta) per block kind where each block adds to its normed input, alpha * x + beta * block(x) (MiniMax)
    residual_factors: dict[str, tuple[float, float]] | None = None
    block_sparse_cap: int = 0  # keys MiniMax-M3's block-sparse indexer keeps in full (model/sparse_cap.py)
    key_window: int = 0  # Doge: keys kept by the dynamic mask's top-k (keep_window_size); 0: every key
    qsa_cap: int = 0  # keys Qwen4-Exp's QSA indexer keeps in full (model/sparse_cap.py)
    post_block_norms: bool = True  # a sandwich layout's post-block norms exist (ArchSpec.post_norms_switch)
    post_block_eps: float | None = None  # the sandwich's post-block norms' own eps (ArchSpec.post_norm_eps)
    residual_gate_temperature: float = 1.0  # the learned residual gates' logits over it (Muse-Spark)
    masked_logit_ids: tuple[int, ...] = ()  # logits set to the dtype's lowest value (ArchSpec.masked_logits)
    logits_vocab: int = 0  # a pruned lm_head's rows, fewer than the embedding's (Apertus-1.5); 0: vocab_size
    recurrent_stacks: RecurrentStackDims | None = None  # weight-shared stacks run in cycles (HRM-Text)
    recurrent_loop: RecurrentLoopDims | None = None  # the middle layers run in a loop, unrolled (Dory)
    ngpt: NgptDims | None = None  # the nGPT layer's scale constants (Dory)
    inverse_head_dim_scale: bool = False  # scores times 1 / head_dim (ArchSpec.inverse_head_dim_scale)
    relative: RelativeBiasDims | None = None  # the relative position bias's widths and log scaling (Inkling)
    block_size: int = 0  # layers per block of the block attention residuals (Inkling2); 0: none

    @property
    def logits_width(self) -> int:
        """The logits' last axis: the lm_head's rows, the vocabulary unless the head was pruned."""
        return self.logits_vocab or self.vocab_size

    @property
    def head_dim(self) -> int:
        """The first layer's head_dim: genai_config's default KV shape (per-layer ones come from the graph)."""
        return self.layers[0].head_dim

    @property
    def num_kv_heads(self) -> int:
        return self.layers[0].num_kv_heads

    @property
    def cache_layers(self) -> tuple[int, ...]:
        """Layers that own a KV cache (graph inputs past_key_values.N.*)."""
        return tuple(
            layer.index for layer in self.layers if not layer.shares_kv and not layer.reads_past_only and layer.attends
        )

    def cache_slot(self, i: int) -> int:
        """Graph layer i's cache index (past_key_values.N): i, except in an unrolled loop, where the
        caches follow HF's order (model/stream.RecurrentLoopDims.cache_slot)."""
        return i if self.recurrent_loop is None else self.recurrent_loop.cache_slot(i)

    @property
    def cache_readers(self) -> dict[int, int]:
        """Layers that read another's cache slot without writing it (LayerDims.reads_past_only) -> that layer."""
        owners = {self.cache_slot(i): i for i in self.cache_layers}
        return {layer.index: owners[self.cache_slot(layer.index)] for layer in self.layers if layer.reads_past_only}

    @property
    def kv_producers(self) -> frozenset[int]:
        """Layers whose cache other layers read."""
        return frozenset(layer.kv_source for layer in self.layers if layer.shares_kv)

    @property
    def context_length(self) -> int:
        """The longest context the package computes exactly: the model's, capped where a sparse
        attention's indexer (model/sparse_cap.py) or Doge's dynamic mask stops keeping every key."""
        cap = self.latent.index_topk if self.latent is not None else self._sparse_cap
        return min(self.max_position_embeddings, cap or self.max_position_embeddings)

    @property
    def _sparse_cap(self) -> int:
        compressed = self.shared_kv.context_cap if self.shared_kv is not None else 0  # DeepSeek-V4's CSA indexer
        return self.block_sparse_cap or self.qsa_cap or compressed or self.key_window

    @property
    def cap_kind(self) -> str:
        """Which indexer or mask caps the context where no latent index_topk does (model/sparse_cap.cap_wording)."""
        if self.block_sparse_cap:
            return "block_sparse"
        if self.shared_kv is not None and self.shared_kv.context_cap:
            return "compressed"
        return "qsa" if self.qsa_cap else "key_window"

    def scale(self, layer: LayerDims) -> float:
        power = -1.0 if self.inverse_head_dim_scale else -0.5  # Inkling: 1 / head_dim
        base = self.attention_scale if self.attention_scale is not None else float(layer.head_dim) ** power
        return base * layer.score_factor if layer.score_factor != 1.0 else base

    def of_layer(self, layer: LayerDims) -> ModelDims:
        """These dims as one layer's attention reads them, the graph building each layer with these: its
        own heads, latent widths and softmax scale where it has them (dots3-note's LayerDims.attention),
        its own query heads (Laguna's num_heads), else the model's."""
        own = layer.attention
        if own is not None:
            return replace(self, num_heads=own.num_heads, latent=own.latent, attention_scale=own.scale)
        return self if not layer.num_heads else replace(self, num_heads=layer.num_heads)


def read_dims(
    config: Any,
    spec: ArchSpec,
    generation: dict[str, Any] | None,
    outer: Any | None = None,
) -> ModelDims:
    """Resolve a transformers text config into `ModelDims`, checking what the spec supports.

    `outer` is the multimodal config the text config came from (None for a text model): token ids
    and architectures live there. A key the spec reads that the config class does not hold (a
    config.json edited to another model_type drops the keys that class does not declare) is the
    user's config, not our bug: one line naming the key.
    """
    try:
        dims = _read_dims(config, spec, generation, outer)
    except AttributeError as error:
        if error.obj is not config and error.obj is not outer:
            raise
        model_type = getattr(config, "model_type", "?")
        raise InputError(
            f"config.json (model_type '{model_type}') has no '{error.name}', which the {spec.name} spec reads; "
            "fix the config's model_type or add the key"
        ) from None
    if outer is not None and dims.architecture in LM_HEAD_ONLY:  # the class's logits: its lm_head's alone
        return replace(dims, logits_multiplier=1.0, logits_divisor=1.0, final_softcap=0.0)
    return dims


def _opt_for(config: Any, spec: ArchSpec) -> Any:
    """The spec's reader of `config` (the model's, or one layer's view): a key by its spellings, else default."""
    keys, unread = spec.config_keys, unread_keys(config)  # another family's keys its class never reads

    def opt(name: str, default: Any = None) -> Any:
        if name in spec.ignore:
            return default
        spellings = [k for k in keys[name].split("|") if k not in unread]
        value = next((v for k in spellings if (v := config_get(config, k)) is not None), None)
        return default if value is None else value

    return opt


def _read_dims(config: Any, spec: ArchSpec, generation: dict[str, Any] | None, outer: Any | None) -> ModelDims:
    opt = _opt_for(config, spec)

    for refusal in (*spec.refusals, *stray_refusals(config)):
        value = config_get(config, refusal.config_key)
        if refusal.applies(value, config_get(config, refusal.other_key) if refusal.other_key else None):
            raise InputError(f"{refusal.message} ({refusal.where(value)})")
    attends = spec.mixers is None or spec.mixers.attention
    # dots3-note's heads are per layer (per_layer_config): the model's are its first layer's
    heads = 0  # 0: no attention
    if attends:
        heads = int(config_get(config, "num_attention_heads") or layer_config(config, 0).num_attention_heads)
    if spec.attention_experts is not None:  # JetMoE: every expert's queries (kv heads each) computed densely
        heads = int(opt("num_experts")) * int(config.num_key_value_heads)
    hidden = int(config.hidden_size)
    act = str(opt("activation", spec.activations[0]))  # Bloom's and MPT's configs name none
    act = spec.activation_names.get(act, act)
    if act not in spec.activations:
        raise InputError(
            f"activation '{act}' is not supported for {spec.name} (supported: {', '.join(spec.activations)})"
        )
    latent, overrides = model_latent(config, spec, hidden, opt, lambda view: _opt_for(view, spec))
    layers = read_layers(config, opt, heads, hidden, spec, latent, overrides)
    shared_kv, layers = shared_kv_dims(opt, spec, heads, layers)  # DeepSeek-V4: one KV head, windows, compressed
    if spec.score_scale and (factor := config_get(config, spec.score_scale)) is not None:
        full_only = spec.score_scale_layers == "full"  # Ergo: the full-attention layers only
        scaled = (x if full_only and x.window > 0 else replace(x, score_factor=float(factor)) for x in layers)
        layers = type(layers)(scaled)
    if spec.inverse_layer_scale and class_read(config, spec.inverse_layer_scale):  # GPT-2: layer i's scores / (i + 1)
        layers = type(layers)(replace(x, score_factor=x.score_factor / (i + 1)) for i, x in enumerate(layers))
    loop = recurrent_loop_dims(opt, spec, len(layers))
    layers = unrolled_layers(layers, loop) if loop is not None else layers  # Dory: one graph layer per pass
    ropes = layer_ropes(config, layers, spec, latent)
    for rope in ropes.values():
        if rope.rope_type not in spec.rope_types:
            supported = ", ".join(spec.rope_types)
            raise InputError(f"rope type '{rope.rope_type}' is not supported for {spec.name} (supported: {supported})")
    query_scalar = opt("query_pre_attn_scalar")
    scale = float(opt("attention_multiplier", 0.0)) or (float(query_scalar) ** -0.5 if query_scalar else None)
    if spec.unit_attention_scale or (spec.scaled_scores and class_read(config, spec.scaled_scores) is False):
        scale = 1.0
    if spec.half_head_dim_scale and heads:  # Zamba: (head_dim / 2) ** -0.5
        scale = (layers[0].head_dim / 2) ** -0.5
    if latent is not None:
        scale = latent_scale(config, latent)
    if spec.dynamic_key_bias and heads:  # Doge: the projections' head_dim, not the cache's
        scale = projected_head_dim(spec, layers[0].head_dim) ** -0.5
    gen = generation or {}
    top = outer if outer is not None else config
    eos = token_ids(config_get(config, "eos_token_id")) + token_ids(gen.get("eos_token_id"))
    if outer is not None:
        eos = token_ids(config_get(outer, "eos_token_id")) + eos
    architectures = config_get(top, "architectures") or ["?"]
    tied = bool(config_get(top, "tie_word_embeddings"))
    ple = int(opt("per_layer_input_size", 0) or 0)
    pad = first_id(gen.get("pad_token_id", config_get(config, "pad_token_id")))
    padding_idx = first_id(config_get(config, "pad_token_id"))  # the modules' own (HF reads no generation_config)
    mamba2 = mamba2_dims(config, opt, spec, [layer.mixer for layer in layers])
    vocab, extra_rows = int(config.vocab_size), config_reads.extra_vocab_rows(opt)
    return ModelDims(
        model_type=str(top.model_type),
        architecture=str(architectures[0]),
        hidden_size=hidden,
        num_layers=len(layers),
        num_heads=heads,
        vocab_size=vocab + extra_rows,  # the embedding's rows
        logits_vocab=vocab if extra_rows else config_reads.pruned_head_rows(opt, vocab, tied),
        rms_eps=spec.fixed_norm_eps or float(opt("norm_eps", 1e-6)),
        max_position_embeddings=int(config_get(config, "max_position_embeddings") or 2048),
        tie_word_embeddings=tied,
        hidden_act=act,
        ropes=ropes,
        layers=layers,
        attention_scale=scale,
        attn_softcap=float(opt("attn_softcap", 0.0)),
        final_softcap=float(opt("final_softcap", 0.0)),
        embedding_multiplier=embedding_multiplier(opt, spec, hidden),
        embedding_scaled_in_table=spec.embedding_scale in ("sqrt_hidden", "config_in_table"),
        head_act=str(opt("head_activation", "gelu")) if spec.head_transform else None,
        residual_multiplier=residual_multiplier(opt, spec, int(config.num_hidden_layers)),
        logits_divisor=float(opt("logits_scaling", 1.0)),
        norm_offset=spec.norm_offset,
        bos_token_id=first_id(gen.get("bos_token_id", config_get(config, "bos_token_id"))),
        eos_token_ids=tuple(dict.fromkeys(eos)),
        pad_token_id=pad,
        padding_idx=padding_idx,
        per_layer_input_size=ple,
        placeholder_ids=placeholder_ids(outer, spec.placeholder_keys),
        placeholder_row=padding_idx if spec.placeholder_row is None else spec.placeholder_row,
        query_scale=position_query_scale_params(config) if spec.query_position_scale else None,
        moe=read_moe(opt, spec, int(config_get(config, "intermediate_size") or 0))  # DBRX's config has none
        if any(layer.sparse for layer in layers) or clamped_swiglu(spec)  # (its dense MLPs read the clamp too)
        else None,
        clip_qkv=float(opt("clip_qkv")) if opt("clip_qkv") else None,
        norm_kind="rms" if spec.rms_when_configured and opt("rms_norm_switch") is not None else spec.norm,
        parallel=spec.norm_layout == "parallel" or bool(spec.parallel_key and opt("parallel_residual", False)),
        logits_multiplier=float(opt("logit_scale", 1.0)),
        conv_kernel=conv_kernel(opt, spec, mixers := [layer.mixer for layer in layers]),
        deltanet=deltanet_dims(opt, spec, mixers),
        mamba2=mamba2,
        mamba=mamba_dims(opt, spec, mixers, hidden),
        rglru=rglru_dims(opt, spec, mixers, hidden, heads),
        rwkv=rwkv_dims(opt, spec, mixers, hidden),
        mlstm=mlstm_dims(config, opt, spec, mixers),
        cca_kernels=_cca_kernels(config, mixers),
        multipliers=resolve_multipliers(config, spec, mamba2),
        latent=latent,
        alibi=alibi_slopes(spec.alibi, heads, opt("alibi_bias_max", 8)) if spec.alibi else (),
        altup=altup_dims(opt, spec),
        hyper=hyper_dims(opt, spec),
        shared_kv=shared_kv,
        per_layer_vocab=int(opt("per_layer_vocab", 0) or 0) if ple else 0,
        hard_tokens=hard_token_ranges(outer, spec),
        # where the config has no use_qk_norm the family always norms (NanoChat; Llama-4's config has the flag)
        scaleless_qk_norm=spec.qk_norm == "scaleless" and bool(opt("qk_norm_flag", True)),
        nope_query_scale=query_temperature(opt) if spec.nope_query_temperature else None,
        nope_query_power=spec.nope_query_power,
        value_head_dim=value_head_width(opt, [layer.head_dim for layer in layers if layer.attends]),
        residual_factors=normed_residual_factors(config, spec),
        block_sparse_cap=block_sparse_cap(opt, spec, opt("layer_types")),
        qsa_cap=qsa_cap(opt, spec, opt("layer_types")),
        key_window=int(opt("dynamic_keep_window", 0) or 0) if spec.dynamic_key_bias else 0,
        post_block_norms=not spec.post_norms_switch or bool(opt("post_norms", True)),
        post_block_eps=float(config_get(config, spec.post_norm_eps)) if spec.post_norm_eps else None,
        residual_gate_temperature=float(opt("residual_gate_temperature", 1.0)),
        masked_logit_ids=config_reads.masked_logit_ids(top, spec.masked_logits, int(config.vocab_size)),
        recurrent_stacks=recurrent_stack_dims(opt, spec, len(layers)),
        recurrent_loop=loop,
        ngpt=ngpt_dims(opt, spec),
        inverse_head_dim_scale=spec.inverse_head_dim_scale,
        relative=relative_bias_dims(config, spec, layers),
        block_size=int(config_get(config, spec.block_residuals.block_size)) if spec.block_residuals else 0,
    )


def _cca_kernels(config: Any, mixers: list[str]) -> tuple[int, int]:
    """Compressed convolutional attention's (depthwise, grouped) q|k kernels (ZAYA's cca_time0 /
    cca_time1); (0, 0) without such layers. Both 1 would leave no conv state, which genai cannot size."""
    if "cca" not in mixers:
        return 0, 0
    kernels = int(config_get(config, "cca_time0")), int(config_get(config, "cca_time1"))
    if kernels[0] + kernels[1] <= 2:
        raise InputError(f"cca_time0 / cca_time1 {kernels} leave no convolution state; both 1 is not supported")
    return kernels
