"""Declarative architecture specs: dimensions come from the HF config, tensor names are data.

Like llama.cpp's converter, a family is one registry entry: where its weights live and how a
layer is wired (norm layout, q/k/v norms, fused projections, per-layer inputs) and the numerics
its config does not spell out (norm offset, embedding scale, which config keys it reads, how its
multimodal runs attend). The graph builder reads only these specs, never a family name; recipes
hold policy only (attention mode, precision, build defaults).

Tensor names are relative to the text decoder's root (`embed_tokens.weight`, `layers.{i}.…`).
The root is found in the checkpoint (`bind`): `model.` for a `…ForCausalLM`, `model.language_model.`
for the `…ForConditionalGeneration` classes transformers 5.x writes, `language_model.model.` for
checkpoints saved by 4.x. So one spec serves a text model and the text decoder of its multimodal
checkpoint; the vision/audio towers are never read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gqa_export.arch.config_keys import DEFAULT_CONFIG_KEYS
from gqa_export.arch.expert_attention import AttentionExpertNames
from gqa_export.arch.layer_names import LatentAttentionNames as LatentAttentionNames  # re-exported
from gqa_export.arch.layer_names import LayerNames as LayerNames
from gqa_export.arch.layer_names import PerLayerInputNames as PerLayerInputNames
from gqa_export.arch.layer_names import SharedKvAttentionNames as SharedKvAttentionNames
from gqa_export.arch.mixer_spec import MixerSpec, Multiplier
from gqa_export.arch.moe_spec import FUSED_EXPERTS as FUSED_EXPERTS  # re-exported: the families import them here
from gqa_export.arch.moe_spec import PER_EXPERT_PROJ as PER_EXPERT_PROJ
from gqa_export.arch.moe_spec import PER_EXPERT_W as PER_EXPERT_W
from gqa_export.arch.moe_spec import MoeNames as MoeNames
from gqa_export.arch.moe_spec import MoeSpec
from gqa_export.arch.ngpt_spec import NgptNames
from gqa_export.arch.relative_bias_spec import BlockResidualNames, RelativeBiasNames, ResidualConvNames
from gqa_export.arch.row_views import RowView
from gqa_export.arch.shared_block_spec import SharedBlockNames
from gqa_export.arch.spec_records import STRAY_WINDOW as STRAY_WINDOW
from gqa_export.arch.spec_records import AbsolutePositions as AbsolutePositions  # re-exported
from gqa_export.arch.spec_records import BidirectionalRuns as BidirectionalRuns
from gqa_export.arch.spec_records import ConfigChoice as ConfigChoice
from gqa_export.arch.spec_records import Refusal as Refusal
from gqa_export.arch.stream_spec import (
    AlternatingUpdateNames,
    AugmentedResidualNames,
    HardTokenEmbedderNames,
    HyperConnectionNames,
    NormedResidualKeys,
    RecurrentStackNames,
)
from gqa_export.errors import InputError

NORM_LAYOUTS = ("pre", "sandwich", "post", "parallel", "post_residual")
# how a Linear's weight is stored: "out_in" (nn.Linear [out, in]) or "in_out" (GPT-2's Conv1D [in, out],
# already MatMul's layout); how a stored fused qkv orders its rows: "stacked" ([q | k | v]) or
# "per_head" (GPT-NeoX: [h0: q k v | h1: q k v | ...], selected into [q | k | v] at export)
LINEAR_LAYOUTS = ("out_in", "in_out")
NORM_KINDS = ("rms", "layer", "layer_free", "rms_free", "l2")
MLP_KINDS = ("gated", "plain")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional")
# Where the text decoder lives, in the order tried: text models, transformers 5.x multimodal
# classes, transformers 4.x multimodal checkpoints (Gemma-3, Mistral-3, Qwen2.5-VL as published).
# the decoder's root in a checkpoint: a causal LM's, transformers 5.x's multimodal classes', their hub layouts'
# (`llm.model.`: Ovis2.5's release)
DECODER_PREFIXES = ("model.", "model.language_model.", "language_model.model.", "model.text_model.", "llm.model.")
LM_HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight", "llm.lm_head.weight")


SINUSOID_RATES = ("fairseq", "transformer")
QK_NORM_LAYERS = ("all", "rope")
# "half": intermediate_size // 2 (RecurrentGemma's MLP halves the configured width)
FFN_SIZES = ("config", "two_thirds_rounded", "shared", "hidden_ratio", "half", "rounded_ratio")
# how a fused query_key_value weight orders its rows (docs/architecture.md §2.3): "stacked" (all q,
# then k, then v: Phi-3), "grouped" (per kv head: its r = heads / kv_heads query heads, its key, its
# value; one kv head is multi-query, kv_heads = heads is GPT-NeoX's and Bloom's per-head q | k | v),
# "blocks_qvk" (four model-parallel blocks, each q | v | k over a quarter of the heads: CodeGen)
QKV_LAYOUTS = ("stacked", "grouped", "blocks_qvk")
# ALiBi: an additive per-head bias slope_h * (key position - query position) on the scores;
# "geometric" (Press et al.'s slopes, extra odd powers past a power of two: Bloom), "bias_max" (MPT's
# 2^(-bias_max * i / n) over the next power of two, the odd ones first)
ALIBI_SLOPES = ("geometric", "bias_max")
# how the kv heads are read: "config" (the kv-heads key, else every head) or "multi_query_flags"
# (one kv head when the multi_query flag is set, the kv-heads key when the grouped_kv flag is,
# else every head: Falcon)
# "doubled_on_sliding": the config's kv heads on full layers, twice that on sliding ones (MiMo-V2-Flash)
KV_HEAD_RULES = ("config", "multi_query_flags", "doubled_on_sliding")


# "sqrt_hidden_if_configured": sqrt(hidden_size) where the config's switch (AFMoE's mup_enabled) is set, by
# the graph after the table (inputs_embeds too); "sqrt_hidden_bf16": sqrt(hidden_size) rounded to bfloat16, by the
# graph after the table (RecurrentGemma's normalizer buffer is a bfloat16 tensor whatever the model's dtype)
EMBEDDING_SCALES = (
    "none", "sqrt_hidden", "config", "config_in_table", "sqrt_hidden_if_configured", "sqrt_hidden_bf16",
)  # fmt: skip
# what each block's output is multiplied by before the residual add: "config" (the config's
# residual_multiplier, Granite; none: 1) or "depth" (scale_depth / sqrt(num_hidden_layers), MiniCPM3);
# "add_index": the k-th add of the stream (the embedding the first, layer i's attention add k = 2(i + 1),
# its MLP add k + 1) sums block / sqrt(k) + residual * sqrt((k - 1) / k), the stream's variance kept (Beam)
RESIDUAL_SCALES = ("config", "depth", "add_index")
BIDIRECTIONAL_LAYERS = ("all", "sliding")
BIDIRECTIONAL_WINDOWS = ("bounded", "unbounded")


def config_keys(**renamed: str) -> Mapping[str, str]:
    """The default config keys with a family's own spellings."""
    return MappingProxyType({**DEFAULT_CONFIG_KEYS, **renamed})


@dataclass(frozen=True)
class ArchSpec:
    """What the graph builder needs to know about a family beyond its HF config.

    norm_layout: "pre" (Llama: norm -> block -> add), "sandwich" (Gemma-2/3/4, GLM-4: norms
    before and after each block), "post" (OLMo-2/3, EXAONE-4: block -> norm -> add), "parallel"
    (Phi-2, Cohere: attention and MLP off one norm, both added), "post_residual" (GPT-1: block ->
    add -> norm, the residual stream itself normed after each add). qk_norm: "head" (the family's
    norm over head_dim: RMSNorm for Qwen3/Gemma-3, LayerNorm with per-head weights for StableLM,
    Cohere, Phi-2), "head_layer" (a LayerNorm over head_dim with each head's own weight and bias, [heads, D]
    tables, whatever the family's norm: Chameleon, graph/head_layer_norm.py) or "full" (RMSNorm over all
    heads, OLMo-2/3). v_norm: a scaleless RMSNorm over
    head_dim on the values (Gemma-4). unit_attention_scale: scores are not scaled (Gemma-4's
    `scaling = 1.0`; its q/k norms carry the scale). qk_norm "scaleless": an RMSNorm over head_dim
    without a weight (the L2 norm times sqrt(D), Llama-4, NanoChat) where the config's use_qk_norm says so (a
    config without the key: always);
    qk_norm_layers "rope" puts the q/k norms on RoPE layers only (Llama-4's NoPE layers have none).
    nope_query_power: NoPE layers' queries are scaled by `(1 + (pos + 1) / length) ** exponent`
    (Beam's scalable softmax, graph/positions.py).
    nope_query_temperature: NoPE layers' queries are scaled by
    `1 + attn_scale * log(1 + floor((pos + 1) / floor_scale))` where the config's
    attn_temperature_tuning says so (Llama-4's attention temperature tuning).
    query_position_scale: queries are scaled by
    `1 + beta * log(1 + floor(pos / original_max_position_embeddings))` (Ministral-3's
    `llama_4_scaling_beta` in rope_parameters); RoPE is linear, so scaling before it is the same.
    norm_offset: the stored norm weight w acts as (offset + w) (Gemma's and Nemotron's 1 + w).
    embedding_scale: the embedding output is multiplied by "sqrt_hidden" (Gemma: inside the table's
    module, so inputs_embeds arrive scaled) or by the config's embedding_multiplier ("config",
    Granite: by the graph, inputs_embeds too; "config_in_table": in the table, MiniCPM3's scale_emb;
    "sqrt_hidden_bf16": sqrt(hidden) rounded to bfloat16, by the graph, RecurrentGemma).
    residual_scale: block outputs times the config's residual_multiplier ("config", Granite) or
    scale_depth / sqrt(num_hidden_layers) ("depth", MiniCPM3). mixers: layers whose token mixer is a
    recurrent-state block
    (LFM2's short convolutions, Qwen3.5's gated DeltaNet, Granite-4.0-H's Mamba2, Jamba's Mamba,
    RecurrentGemma's RG-LRU). ffn_size:
    "config" (intermediate_size), "two_thirds_rounded" (LFM2's block_auto_adjust_ff_dim: 2/3 of it,
    times block_ffn_dim_multiplier, rounded up to block_multiple_of) or "shared" (Granite-4.0-H:
    the shared MLP's shared_intermediate_size) or "half" (RecurrentGemma: intermediate_size // 2).
    attention_output_gate: q_proj is twice as wide, each head's rows a query and then a gate, and
    the attention output is multiplied by sigmoid(gate) before o_proj (Qwen3.5).
    multipliers: config constants that scale a Linear's input or output (`Multiplier`, Falcon-H1's
    µP multipliers); one equal to 1 adds nothing to the graph.
    layer_blocks: what a layer holds (LAYER_BLOCKS), by its `layer_types` value; types not listed
    hold both blocks. Nemotron-H's layers are each one block: a Mamba2 or attention mixer, or an MLP.
    latent_attention: q/k/v come from a compressed latent and one shared rope key (multi-head
    latent attention); the cache holds the expanded per-head K/V (docs/latent-attention.md).
    qkv_layout / alibi / kv_heads_rule / embedding_norm: the classic decoders' fused projections,
    ALiBi position biases (standard Attention only: GroupQueryAttention takes no per-head additive
    bias), multi-query flags and embedding LayerNorm (Falcon, Bloom, MPT, CodeGen).
    """

    name: str
    embed: str = "embed_tokens.weight"
    final_norm: str | None = "norm.weight"  # None: the last layer's output goes to the lm_head as is (GPT-1)
    layer_prefix: str = "layers.{i}."
    layer: LayerNames = field(default_factory=LayerNames)
    norm_layout: str = "pre"
    qk_norm: str | None = None
    v_norm: bool = False
    unit_attention_scale: bool = False
    # scores scaled by (head_dim / 2) ** -0.5: Zamba's attention, whose heads see [hidden | embeddings]
    half_head_dim_scale: bool = False
    query_position_scale: bool = False
    # (exponent, length): NoPE layers' queries times (1 + (pos + 1) / length) ** exponent, a scalable
    # softmax whose constants the modeling code hard-codes (Beam: (0.1, 2048)); None: no such scale
    nope_query_power: tuple[float, int] | None = None
    qk_norm_layers: str = "all"  # QK_NORM_LAYERS: every attention layer, or RoPE layers only
    nope_query_temperature: bool = False
    # rms | layer (LayerNorm, bias where stored) | layer_free (no weights: OLMo) | rms_free (RMSNorm without a
    # weight: NanoChat's F.rms_norm; the norm's tensor names are then never read) | l2 (x * rsqrt(sum x^2 + eps),
    # no weight: nGPT's; RMSNorm at eps / d times 1 / sqrt(d), graph/blocks.normalize)
    norm: str = "rms"
    rms_when_configured: bool = False  # RMSNorms instead where the config sets rms_norm_eps (Cohere2-MoE)
    fixed_norm_eps: float | None = None  # an eps the modeling code hard-codes (OLMo: 1e-5)
    fixed_rope_theta: float | None = None  # a RoPE base the modeling code hard-codes (GPT-J, CodeGen: 10000)
    mlp: str = "gated"  # gated: down(act(gate) * up) | plain: down(act(up)) (Phi-2, StarCoder2, Nemotron)
    parallel_key: str | None = None  # a config flag that switches the block to the parallel layout (StableLM)
    qk_norm_after_rope: bool = False  # HunYuan normalizes q/k per head after RoPE
    qk_norm_eps: float | None = None  # an eps the modeling code hard-codes for the q/k norms (Chameleon: 1e-5)
    # (config key of a name -> id map, name prefix): the class sets the logits of the ids whose names start
    # so to the dtype's lowest value (graph/masked_logits.py; Chameleon's image tokens, "IMGIMG" in vocabulary_map)
    masked_logits: tuple[str, str] | None = None
    rope_interleaved: bool = False  # GPT-J style RoPE pairs (Cohere, GLM-4, ERNIE-4.5)
    # RoPE rotating by minus the angle: rotate_half gives [x2, -x1] instead of [-x2, x1] (NanoChat), the
    # same as a sin table of the opposite sign, which GQA's fused RoPE and the plain ops both read
    rope_reversed: bool = False
    # all | sliding (Cohere2) | sliding_or_dense_prefix (Cohere2-MoE: also the dense layers whose
    # prefix_dense_sliding_window_pattern is 1) | sliding_if_windowed (EXAONE-4) | if_configured (Granite-4.0-H: every
    # layer when position_embedding_type is "rope", none otherwise) | if_flag (Zamba2: every layer where the
    # config's rope_flag, use_mem_rope, is set) | if_theta (OLMo-Hybrid: every layer when rope_parameters
    # hold a rope_theta, none otherwise) | typed (Cohere-Compass: every layer but those of a type whose
    # rope_parameters entry is null) | none (Jamba, Nemotron-H): others are NoPE
    rope_layers: str = "all"
    head_dim_from_hidden: bool = False  # hidden / heads whatever config.head_dim says (StableLM)
    # transformers' class rotates every channel whatever rotary_dim says (MiniMax): a narrower rope
    # is rotated as configured, and the build says it differs from the installed class there
    hf_rotates_full_head: bool = False
    # the layer type whose layers keep only the top blocks of keys (MiniMax-M3's block-sparse indexer):
    # where some layer has it, the package's context is capped where every key is kept (model/sparse_cap.py)
    block_sparse_type: str | None = None
    # the layer type whose layers keep the top blocks of a QSA indexer (Qwen4-Exp): the same cap, at
    # indexer_budget + indexer_compress_ratio - 1 keys (model/sparse_cap.py)
    qsa_type: str | None = None
    # transformers 4.x configs (one rope_theta/rope_scaling): the sliding layers' rope, which the
    # modeling code derives -- "local_base" (Gemma-3: unscaled, rope_local_base_freq) or "unscaled"
    # (OLMo-3: unscaled, rope_theta); 5.x configs spell it per layer type in rope_parameters
    sliding_rope: str | None = None
    # the rotated share of a layer type's rope whose rope_parameters name none (MiMo-V2-Flash's class
    # reads 0.334 there, never the config's top-level partial_rotary_factor); None: the top-level key or 1
    rope_partial_default: float | None = None
    # the class's default rope rotates the whole head: a config's partial_rotary_factor (which a
    # Qwen3.5-derived config may still carry) is not read for rope_type default (Lara-Mini)
    default_rope_whole_head: bool = False
    moe: MoeSpec | None = None
    # a per-head sink logit tensor of the attention module (gpt-oss; "a|b": the first the checkpoint
    # holds), on every attention layer ("all") or on the sliding ones only ("sliding": MiMo-V2-Flash)
    attention_sinks: str | None = None
    attention_sink_layers: str = "all"
    per_layer_inputs: PerLayerInputNames | None = None
    activations: tuple[str, ...] = ("silu",)
    # a config's own activation names -> transformers' (GPT-1's afn "gelu" is its tanh gelu_new)
    activation_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    rope_types: tuple[str, ...] = ROPE_TYPES
    refusals: tuple[Refusal, ...] = ()
    # fields a config key sets by its value (Molmo2's qk_norm_type, norm_after; model/spec_choices.py)
    config_choices: tuple[ConfigChoice, ...] = ()
    norm_offset: float = 0.0
    embedding_scale: str = "none"
    residual_scale: str = "config"  # RESIDUAL_SCALES
    config_keys: Mapping[str, str] = field(default_factory=config_keys)
    ignore: tuple[str, ...] = ()  # options this class never applies though its config may set them
    placeholder_keys: tuple[str, ...] = ()  # top-level keys of placeholder ids embedded as pad_token_id
    placeholder_row: int | None = None  # the id those placeholders embed as instead (Kimi-K2.5: 0); None: pad
    bidirectional: BidirectionalRuns | None = None
    mixers: MixerSpec | None = None
    ffn_size: str = "config"
    attention_output_gate: bool = False  # q_proj holds [query | gate] per head; out *= sigmoid(gate) (Qwen3.5)
    # the sandwich's post-block norms exist only where the config's "post_norms" switch is on (HyperCLOVAX)
    post_norms_switch: bool = False
    # modules holding DiffLlama's lambdas (graph/differential.py: cache heads 2 x head_dim) and Doge's A and
    # dt_proj (graph/dynamic_mask.py: head_dim + 16); model/layer_ropes.projected_head_dim
    differential_attention: str | None = None
    dynamic_key_bias: str | None = None

    output_gate_activation: str = "sigmoid"  # of the output gate (graph/output_gate.py): sigmoid | softplus (Laguna)
    multipliers: tuple[Multiplier, ...] = ()
    layer_blocks: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # a config's own layer-type values -> transformers' (GPT-Neo's "local" is "sliding_attention")
    layer_type_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    positions: AbsolutePositions | None = None  # learned absolute position embeddings (GPT-2, OPT)
    linear_layout: str = "out_in"  # LINEAR_LAYOUTS: "in_out" for Conv1D checkpoints (GPT-2)
    # multi-head latent attention instead of q/k/v projections (DeepSeek-V2/V3)
    latent_attention: LatentAttentionNames | None = None
    # one KV head that is key and value, q-LoRA, RoPE on the trailing channels rotated back on the output, a grouped
    # low-rank output projection (DeepSeek-V4; graph/shared_kv_attention.py)
    shared_kv_attention: SharedKvAttentionNames | None = None
    # a layer type -> the rope_parameters entry its layers read, where the entries are not keyed by layer type
    # (DeepSeek-V4's "main" / "compress")
    layer_rope_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # LongCat-Flash's MLA: the query times sqrt(hidden / q_lora_rank) and the normed latent times
    # sqrt(hidden / kv_lora_rank) (model/latent.py)
    latent_lora_scale: bool = False
    # graph layers per stored decoder layer: LongCat-Flash's layer i holds two attention + MLP
    # sublayers, graph layers 2i and 2i + 1, each with its own KV cache; "{s}" in a module name is
    # the sublayer's index (`self_attn.{s}.q_a_proj`), the other modules are the stored layer's
    sublayers: int = 1
    attention_experts: AttentionExpertNames | None = (
        None  # a mixture of attention heads (JetMoE; arch/expert_attention.py)
    )
    qkv_layout: str = "stacked"  # QKV_LAYOUTS: the row order of a fused layer.qkv weight
    alibi: str | None = None  # ALIBI_SLOPES: the attention scores get an ALiBi bias (no RoPE)
    kv_heads_rule: str = "config"  # KV_HEAD_RULES
    embedding_norm: str | None = None  # a LayerNorm right after the embedding (Bloom)
    # (bias, scale) at the decoder root: the embedding becomes (e + bias) * scale (ZAYA, graph/affine_residual.py)
    input_affine: tuple[str, str] | None = None
    norms_where_stored: bool = False  # a layer norm the checkpoint lacks is skipped (ModernBERT's layer 0: Identity)
    # (dense, norm) checkpoint modules of a head before the lm_head: norm(act(dense(x))) (ModernBERT-decoder)
    head_transform: tuple[str, str] | None = None
    # residual-stream mechanisms (arch/stream_spec.py): alternating updates over parallel streams, a
    # low-rank augmented residual, per-layer gaussian top-k sparsity of the MLP gate
    # (activation_sparsity_pattern), special-id ranges embedded by their own small tables
    alternating_updates: AlternatingUpdateNames | None = None
    # hc_mult copies of the residual mixed in and out of each block by learned weights (HunYuan-V4)
    hyper_connections: HyperConnectionNames | None = None
    augmented_residual: AugmentedResidualNames | None = None
    activation_sparsity: bool = False
    # pre-norm layers whose residual is the block's normed input, both scaled (MiniMax); None: the stream
    normed_residual: NormedResidualKeys | None = None
    hard_token_embedders: tuple[HardTokenEmbedderNames, ...] = ()
    # shared transformer blocks run ahead of the mixer of the layers of one type (Zamba2)
    shared_block: SharedBlockNames | None = None
    # two weight-shared layer stacks run in cycles over two streams (HRM-Text); `layer_prefixes`, resolved
    # from the config (model/stream.stack_layer_prefixes), is each graph layer's stored layer
    recurrent_stacks: RecurrentStackNames | None = None
    layer_prefixes: tuple[str, ...] = ()
    # the middle layers run n_recurrent_loops times with shared weights, each pass its own KV caches
    # (Dory; model/stream.RecurrentLoopDims, graph/recurrent_loop.py); `layer_prefixes` resolved as above
    recurrent_loop: bool = False
    # nGPT layers (Dory; arch/ngpt_spec.py, graph/ngpt.py): interpolated residuals over l2 norms, scaled
    # query, gate, MLP and logits
    ngpt: NgptNames | None = None
    # (a stored fused layer module, the modules its equal row blocks are, in order): read as those
    # (source/split_projections.py; HRM-Text's attn.gqkv_proj)
    split_projections: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # a stored fused [q | k | v] module read as layer.q / k / v at the config's heads x head_dim, kv heads x
    # head_dim twice (source/split_projections.py; Molmo2's released self_attn.att_proj)
    stored_qkv: str | None = None
    # a checkpoint layout transformers' loader rewrites: (regex, replacement, transposed: the tensor stored
    # (in, out)) renames of stored names into the class's, in order, after the layer-pair collapse where
    # `collapsed_layer_pairs` (source/stored_renames.py; Ergo's serving layout, Dory's backbone. and mixer blocks);
    # a replacement may be a function of the match (Inkling2's block queries: stored index i is layer i + 1)
    stored_renames: tuple[tuple[str, str | Callable[[re.Match[str]], str], bool], ...] = ()
    # tensors the class reads that the checkpoint stores as rows of others: alternating (Inkling's w13), interleaved
    # halves (Inkling2's w13 experts), chunks, transposed (ERNIE-4.5-VL's hub router and moe_statics), joined
    # (Step3p7's release's moe.gate_proj and moe.up_proj, Molmo2's wte.embedding and wte.new_embedding):
    # arch/row_views.py, read by source/row_views.py
    row_views: tuple[RowView, ...] = ()
    collapsed_layer_pairs: bool = False
    # (the spec's spelling, another one) of module-name prefixes inside a layer: a layer tensor stored only
    # under the other is read as the spec names it (source/aliases.py; Kimi-Linear's writers differ)
    tensor_aliases: tuple[tuple[str, str], ...] = ()
    # a config key whose value, where set, multiplies the attention logits of every layer ("all": Muse-Glimmer's
    # qk_scale_factor, the query times it after its scaleless norm) or of the full-attention ones ("full": Ergo's
    # global_attention_scale, queries and keys each times its square root); model/dims LayerDims.score_factor
    score_scale: str | None = None
    score_scale_layers: str = "all"
    # config switches of GPT-2's score scale: `scaled_scores` false leaves the scores unscaled (no head_dim ** -0.5);
    # `inverse_layer_scale` true divides layer i's scores by i + 1 (model/dims LayerDims.score_factor)
    scaled_scores: str | None = None
    inverse_layer_scale: str | None = None
    # a config key holding the sandwich's post-block norms' own eps (Muse-Glimmer's post_norm_eps); None: the norms'
    post_norm_eps: str | None = None
    # the final norm's own offset where it is not norm_offset's (Muse-Glimmer: w, its layers' norms 1 + w)
    final_norm_offset: float | None = None
    # a weightless RMSNorm inside the embedding module (Muse-Glimmer's embed_tokens.embed_norm): on the table's rows,
    # at the config's norm eps, so inputs_embeds arrive normed (graph/input_embedding.py)
    embedding_table_norm: bool = False
    # a weightless RMSNorm over each head's attention output before the output gate, at the config's norm eps
    # (Muse-Spark's self_attn.o_norm; graph/head_output_norm.py)
    head_output_norm: bool = False
    # the sandwich's (post-attention, post-feedforward) norms' own kinds where they are not the layers': "rms_free"
    # (weightless), "rms" (the layers' weighted one), "input_scaled" (the input times (norm_offset + w), then a
    # weightless RMSNorm: Muse-Spark's post-feedforward norm; graph/input_scaled_norm.py); None: the layers'
    post_norm_kinds: tuple[str, str] | None = None
    # the residual gates' residual factor floored at the square root of this (Muse-Spark's clamp at 1e-3 before its
    # sqrt); their logits over the config's residual_gate_temperature (graph/learned_residual_gate.py)
    residual_gate_floor: float = 0.0
    relative_bias: RelativeBiasNames | None = None  # arch/relative_bias_spec.py (Inkling, Inkling2)
    residual_convs: ResidualConvNames | None = None
    block_residuals: BlockResidualNames | None = None
    inverse_head_dim_scale: bool = False  # scores x 1 / head_dim, not head_dim ** -0.5 (Inkling)
    head_rows_dropped: bool = False  # output_vocab_size keeps the first rows of a vocab_size-row head (Inkling)
    decoder_prefixes: tuple[str, ...] = DECODER_PREFIXES
    lm_head_names: tuple[str, ...] = LM_HEAD_NAMES
    # Resolved by `bind` against a checkpoint: the decoder root and the lm_head tensor.
    prefix: str = "model."
    lm_head: str = "lm_head.weight"

    def tensor(self, name: str) -> str:
        """A decoder-level tensor's checkpoint name (`embed`, `final_norm`, PLE tensors)."""
        return f"{self.prefix}{name}"

    def layer_tensor(self, i: int, module: str, suffix: str = "weight") -> str:
        if self.sublayers > 1:  # graph layer i is sublayer i % n of stored layer i // n
            i, module = i // self.sublayers, module.replace("{s}", str(i % self.sublayers))
        layer_prefix = self.layer_prefixes[i] if self.layer_prefixes else self.layer_prefix.format(i=i)
        name = f"{self.prefix}{layer_prefix}{module}"
        return f"{name}.{suffix}" if suffix else name

    def bind(self, names: Container[str]) -> ArchSpec:
        """This spec with the decoder root and lm_head found among a checkpoint's tensor `names`."""
        prefix = next((p for p in self.decoder_prefixes if f"{p}{self.embed}" in names), None)
        if prefix is None:
            tried = ", ".join(f"{p}{self.embed}" for p in self.decoder_prefixes)
            raise InputError(
                f"cannot find the text decoder's weights in the checkpoint (looked for {tried}); "
                "the checkpoint does not match its config.json"
            )
        lm_head = next((n for n in self.lm_head_names if n in names), self.lm_head_names[0])
        return replace(self, prefix=prefix, lm_head=lm_head)
