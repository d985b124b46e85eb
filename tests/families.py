"""The registered families: one row per tiny checkpoint the common parity checks of
tests/arch/test_families.py run on (the test-side mirror of gqa_export/arch/families.py).

A row says how its checkpoint is made, which checks apply to it (attention modes, quantized
precisions, the fp16 CUDA graph), what its package is expected to say (genai model type, how its
experts and embedding tables quantize), and what is known to differ (how much signal its random
logits carry, a transformers 4.x reference that computes it differently). Checks that only one
family has stay in its module (test_moe.py, test_gemma4.py, test_multimodal.py) and read the same
session builds through `FamilyBuilds`.

    from families import FAMILIES, REGISTERED, FamilyBuilds
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dense_models import VARIANTS as DENSE_VARIANTS
from dense_models import save_dense
from derived_moe_models import COHERE2_MOE_RMS, COHERE2_MOE_SIGMOID
from gemma3n_models import save_gemma3n
from kimi_models import save_kimi_linear
from llama4_models import save_llama4
from moe_models import save_moe
from state_space_models import VARIANTS as STATE_SPACE_VARIANTS
from state_space_models import save_state_space
from tiny_models import save_model
from wrapped_models import save_wrapped

# the logits prompt: longer than every window (Gemma-4's 4 and 6, the others' 8)
PROMPT = (0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13)
# 20 tokens: past Gemma-3's window (8) and Ministral-3's query-scale step (original_max 16)
MULTIMODAL_PROMPT = (0, 17, 45, 99, 200, 3, 7, 120, 64, 33, 250, 11, 12, 13, 14, 15, 16, 17, 18, 19)
# greedy generation: one token, a short prompt, one far past the windows (ids below the placeholders)
PROMPTS = ((0,), (0, 17, 45, 99, 200, 3, 7), tuple((11 * i + 5) % 380 for i in range(30)))
GEMMA4_PROMPTS = ((0,), (0, 17, 45, 99, 200, 3, 7), tuple((11 * i + 5) % 290 for i in range(30)))
MULTIMODAL_PROMPTS = ((0,), MULTIMODAL_PROMPT)
# longer than the DeltaNet's conv kernel and than HF's 64-token chunks of the gated delta rule
LONG_PROMPT = tuple((7 * i + 3) % 380 for i in range(70))
# the three texts of tests/runtime/test_run.py as the tiny tokenizer encodes them (BOS first; that test
# checks the package's tokenizer agrees): 8, 32 and 97 tokens
TEXT_PROMPTS = (
    (0, 45, 319, 81, 84, 266, 265, 302),
    (0, 57, 267, 226, 86, 304, 300, 269, 276, 92, 83, 274, 84, 93, 329, 312, 280, 87, 294, 331, 363, 340, 294, 285,
     70, 72, 267, 376, 226, 91, 291, 293),
    (0, *(52, 83, 315, 226, 90, 85, 264, 263, 262, 78, 314, 294, 277, 330, 263, 268, 353, 309, 73, 274, 84, 93, 19,
          226) * 4),
)  # fmt: skip
ALL_MODES = ("gqa", "bias", "split")
# the Llama variants' modes: bias also in CUDA's form (whole buffer, nonpad_kv_seqlen) run on CPU,
# and with GroupQueryAttention taking the attention bias (CPU's single-graph alternative)
LLAMA_MODES = ("gqa", "bias", "bias_nonpad", "bias_gqa", "split")
# a mode's other forms: the mode before "_" built with these recipe settings (FamilyBuilds.package
# keys a form by that mode and its settings, so ("bias_gqa") and ("bias", settings=(bias_op=gqa)) are one build)
MODE_SETTINGS = {
    "bias_nonpad": ("attention.bias_kv_read=nonpad",),
    "bias_gqa": ("attention.bias_op=gqa",),
    "bias_growing": ("attention.bias_cache=growing",),  # the concatenating cache: key positions from the mask
    "gqa_latent": ("attention.latent_cache=true",),  # multi-head latent attention's latent cache
}
TIED = frozenset({"model.embed_tokens.qweight"})  # the tied table, shared with the lm_head
CLASSIC_TIED = frozenset({"transformer.word_embeddings.qweight"})  # Falcon's, under `transformer.`
STANDARD_MODES = ("bias", "split")  # the standard-Attention graphs (plain-op RoPE, the window as a mask)
# A batch of two prompts of different lengths (tests/arch/test_families.py test_ragged_batch_*),
# right-padded as onnxruntime-genai pads it (its pad_token_id, zeros in attention_mask): each row must
# come out as HF on its own unpadded prompt. The short row is longer than every conv kernel (3 and 4),
# the long one than the windows (8) and Llama-4's chunks (6); both end well past them while decoding.
RAGGED = ((0, 45, 319, 81, 17), tuple((7 * i + 3) % 380 for i in range(13)))
RAGGED_DECODE = ((17, 99, 3, 250), (64, 12, 200, 7))  # ORT's decode steps, one token per row each
RAGGED_NEW = 20  # onnxruntime-genai's greedy tokens per row
# ORT reads the padding from attention_mask alone: its runs pad with another id than the package's,
# since HF zero-initialises pad_token_id's embedding row, which would zero the mixers' input at the
# padding whatever the mask says (docs/hybrid-state.md §1.4)
ORT_PAD = 9
# every attention mode in a ragged batch: ORT logits row by row in gqa, genai's tokens in each mode
RAGGED_EVERY_MODE: dict[str, Any] = dict(ragged_logits_modes=("gqa",), ragged_generate_modes=ALL_MODES)
# a ragged batch in the two modes that differ in where positions and masks come from
RAGGED_TWO_MODES: dict[str, Any] = dict(ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa", "bias"))
# greedy tokens for one prompt, the longest (30 tokens) + 24: the rows of issue #39's later types whose
# mechanisms other rows check on every prompt (the suite's time: HF generate dominates a tiny MoE row)
ONE_PROMPT: dict[str, Any] = dict(prompts=PROMPTS[2:], new_tokens=24)
# a ragged batch in gqa alone: ORT logits and genai's tokens
RAGGED_GQA: dict[str, Any] = dict(ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa",))
RAGGED_LOGITS: dict[str, Any] = dict(ragged_logits_modes=("gqa",))  # ORT logits only

# transformers 4.x computes these differently from 5.x itself (the reference is the installed HF);
# exact under 5.x, compared only there
XIELU_BF16_UNDER_4X = "4.57's xIELU keeps its alpha/beta parameters in bf16 (logits off by ~6e-3)"
GRANITE_HYBRID_UNDER_4X = (
    "4.57's Mamba2 gated RMSNorm spans the whole inner width whatever mamba_n_groups says (5.x and the "
    "mamba_ssm kernel normalize per group; the tiny model has 2 groups), and its forward(use_cache=True) "
    "returns no cache without a HybridMambaAttentionDynamicCache"
)
JAMBA_CACHE_UNDER_4X = (
    "4.57's Jamba forward(use_cache=True) returns no cache without a HybridMambaAttentionDynamicCache "
    "(its uncached logits and its generate() agree with the export)"
)
FALCON_H1_CACHE_UNDER_4X = (
    "4.57's forward(use_cache=True) returns no cache without a FalconHybridMambaAttentionDynamicCache, so its "
    "decode steps start over (its whole-sequence logits match the export to 3e-6, and its generate() does too)"
)
LFM2_CACHED_GENERATE_UNDER_4X = (
    "4.57's generate() with its conv cache gives other tokens than its own uncached greedy decoding "
    "(which 5.x, the export and the 4.57 logits agree with)"
)
LONGROPE_SWITCH_UNDER_4X = (
    "4.57's generate() re-runs the whole sequence with the long factors once the length passes "
    "original_max_position_embeddings (64 here), which a decode graph cannot (README, Known limits)"
)
PARALLEL_QK_LN_UNDER_4X = (
    "4.57 cannot build a StableLM with parallel residual and q/k LayerNorm from its own config "
    "(AttributeError in its weight init)"
)

# a cheap row's greedy check (a family that is another's layers with a mechanism changed, no window or state
# its prompts' lengths matter to): the 1- and 7-token prompts, 24 tokens each
SHORT_GENERATE: dict[str, Any] = dict(prompts=PROMPTS[:2], new_tokens=24)

# ALiBi families run in mode bias only: their prompt/decode logits, genai logits and greedy tokens there
ALIBI: dict[str, Any] = dict(logits_mode="bias", logits_modes=("bias",), generate_modes=("bias",))


@dataclass(frozen=True)
class Family:
    """One registered checkpoint and the common checks that apply to it."""

    name: str  # the test id and the checkpoint's name
    kind: str  # llama | dense | moe | gemma4 | multimodal: which maker, which prompts
    make: Callable[[Path], Path] | None  # folder -> checkpoint; None: conftest.py's `checkpoints` (variants.py)
    genai_type: str = "decoder"  # model.type of the single-graph package's genai_config.json
    prompt: tuple[int, ...] = PROMPT  # prompt + 6 decode steps against HF
    prompts: tuple[tuple[int, ...], ...] = PROMPTS  # `new_tokens` greedy tokens each, equal to HF generate
    new_tokens: int = 40
    each_varied: bool = False  # every continuation holds 4+ distinct ids (else: some continuation)
    one_token_logits: bool = False  # a 1-token prompt + 5 decode steps too, against HF's one full forward
    signal: float = 1.0  # HF's logits reach above this (they carry signal, not all ~0)
    generate_modes: tuple[str, ...] = ()  # modes whose greedy onnxruntime-genai tokens equal HF generate
    logits_modes: tuple[str, ...] = ()  # modes whose genai prompt logits and 16 greedy tokens equal HF
    quantized: tuple[str, ...] = ()  # precisions built (with their smoke run) and dequantized weight by weight
    accuracy_level: int | None = None  # MatMulNBits' accuracy level for those; None: the build's default
    int8_relative_l2: float | None = None  # quant report: int8 prompt logits within this of the fp32 export's
    experts: str | None = None  # "fused": MoE / QMoE ops; "plain": plain ops (float in int4/int8 packages)
    # MatMuls over 3-D weights that int4/int8 keep float (MatMulNBits takes 2-D): Zamba's per-head x_proj / dt_proj
    float_matmuls: bool = False
    gathered_tables: frozenset[str] = frozenset()  # embedding tables GatherBlockQuantized reads (int4/int8)
    # the transformers majors under which the quantized smoke run ends at EOS before its 16 tokens
    # (the random weights are drawn by the installed transformers' initializers)
    smoke_meets_eos: frozenset[int] = frozenset()
    fp16_cuda: bool = False  # the fp16 CUDA package runs on CPU close to HF
    # a recurrent state HF keeps in float32 in a half-precision model stays so in the fp16 graph (RWKV's WKV state)
    fp32_recurrent_state: bool = False
    differs_under_4x: str | None = None  # why transformers 4.x's reference differs (compared under 5.x only)
    generate_differs_under_4x: str | None = None  # why 4.x's generate() differs (its greedy tokens compared under 5.x)
    fp16_differs_under_4x: str | None = None  # why the fp16 package is compared with 4.x's reference under 5.x only
    since_major: int = 4  # the first transformers major version that has the class (or the checkpoint's layout)
    since: tuple[int, int] = (4, 0)  # the first (major, minor) that has it, for a class a minor release added
    logits_mode: str = "gqa"  # the single-graph package test_logits_match_hf builds (bias for ALiBi families)
    # a right-padded batch of RAGGED: the single-graph modes whose ORT logits of each row equal HF on
    # the row alone (prompt and decode steps), and the modes (MODE_SETTINGS forms too) whose greedy
    # onnxruntime-genai tokens of each row equal HF generate on it
    ragged_logits_modes: tuple[str, ...] = ()
    ragged_generate_modes: tuple[str, ...] = ()


def llama(name: str, genai_type: str, modes: tuple[str, ...] = ("gqa",), **facts: Any) -> Family:
    """A Llama-spec checkpoint of tests/variants.py (conftest.py's `checkpoints`) or, with `make`,
    one only the registry builds: logits with a 1-token prompt too, 48 greedy tokens in `modes` for
    the registry's prompts and the three texts, every continuation varied."""
    facts = {"make": None, "prompts": PROMPTS + TEXT_PROMPTS, "new_tokens": 48, **facts}
    return Family(kind="llama", name=name, genai_type=genai_type, generate_modes=modes, each_varied=True,
                  one_token_logits=True, **facts)  # fmt: skip


def dense(name: str, **facts: Any) -> Family:
    """A second-wave dense checkpoint: a family or a variant of tests/dense_models.py."""
    model_type, overrides = DENSE_VARIANTS.get(name, (name, {}))
    facts = {"logits_modes": STANDARD_MODES, **facts}
    return Family(name, "dense", lambda folder: save_dense(folder, model_type, **overrides), signal=0.5, **facts)


def hybrid(name: str, **facts: Any) -> Family:
    """A hybrid decoder with recurrent state (tests/dense_models.py): its state layers run in the GQA
    graph only (the standard-Attention modes are refused), so greedy tokens in gqa, no other mode; a
    ragged batch there, whose padding must leave each row's conv and recurrent state as they were at
    its last real token (docs/hybrid-state.md §1.4)."""
    facts = {"ragged_logits_modes": ("gqa",), "ragged_generate_modes": ("gqa",), **facts}
    return dense(name, logits_modes=(), generate_modes=("gqa",), **facts)


def state_space(name: str, **facts: Any) -> Family:
    """A state-space checkpoint of tests/state_space_models.py (Mamba2 / Mamba layers, with attention
    layers or none): checked as a hybrid row is (greedy tokens and a ragged batch in gqa, the
    standard-Attention modes refused), on the 70-token prompt, int4, from 5.x (the tiny configs were
    not checked under 4.57's classes)."""
    model_type, overrides = STATE_SPACE_VARIANTS.get(name, (name, {}))
    facts = {"prompt": LONG_PROMPT, "quantized": ("int4",), "since_major": 5, **facts}
    return Family(
        name, "state_space", lambda folder: save_state_space(folder, model_type, **overrides), signal=0.5,
        generate_modes=("gqa",), ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa",), **facts,
    )  # fmt: skip


def dense_family(name: str, **facts: Any) -> Family:
    """A dense family's own checkpoint: every mode on logits, greedy tokens, int4."""
    return dense(name, **{"generate_modes": ("gqa",), "quantized": ("int4",), **facts})


def moe(
    name: str, family: str | None = None, hub_layout: bool = True, overrides: dict[str, Any] | None = None, **facts: Any
) -> Family:
    """A mixture of experts (tests/moe_models.py); `hub_layout` False: transformers 5.x's fused experts."""
    model_type = family or name
    return Family(
        name, "moe", lambda folder: save_moe(folder, model_type, hub_layout=hub_layout, **(overrides or {})), **facts
    )


def moe_family(name: str, modes: tuple[str, ...] = ("gqa",), **facts: Any) -> Family:
    """A mixture-of-experts family's hub checkpoint: greedy tokens, int4 and int8 (QMoE) packages."""
    quantized = dict(quantized=("int4", "int8"), accuracy_level=0, int8_relative_l2=0.3)
    return moe(name, generate_modes=modes, experts=facts.pop("experts", "fused"), **quantized, **facts)


def classic_moe(name: str, **facts: Any) -> Family:
    """A Llama-shaped mixture of experts of tests/llama_like_models.py: every mode on logits, greedy
    tokens, int4 and int8 (QMoE) packages."""
    quantized = dict(quantized=("int4", "int8"), accuracy_level=0, int8_relative_l2=0.3)
    return dense(name, **{"generate_modes": ("gqa",), "experts": "fused", **quantized, **facts})


def gemma4(name: str, **facts: Any) -> Family:
    """A Gemma-4 checkpoint form (tests/gemma4_models.py through variants.GEMMA4_VARIANTS)."""
    return Family(
        name, "gemma4", None, genai_type="gemma4_text", prompts=GEMMA4_PROMPTS, generate_modes=ALL_MODES,
        since_major=5, **facts,
    )  # fmt: skip


def gemma3n(name: str, form: str, **facts: Any) -> Family:
    """A Gemma-3n checkpoint form (tests/gemma3n_models.py): every mode, a 1-token prompt too, a
    ragged batch through onnxruntime-genai in every mode. Marked from 5.x: the tiny configs are
    spelled for 5.x and were not checked under 4.57's gemma3n."""
    return Family(
        name, "gemma3n", lambda folder: save_gemma3n(folder, form), generate_modes=ALL_MODES,
        logits_modes=STANDARD_MODES, one_token_logits=True, since_major=5, ragged_generate_modes=ALL_MODES, **facts,
    )  # fmt: skip


# prompts holding the wrapped classes' placeholder ids (300 / 301): embedded as the decoder's own rows
WRAPPED_PROMPTS = ((0,), (0, 17, 45, 300, 300, 99, 200, 301, 3, 7))
ONE_WRAPPED_PROMPT: dict[str, Any] = dict(prompts=WRAPPED_PROMPTS[1:], new_tokens=16)


def wrapped(
    name: str, model_type: str, text_type: str, genai_type: str, overrides: dict[str, Any] | None = None, **facts: Any
) -> Family:
    """A multimodal class around an exported decoder (tests/wrapped_models.py; `overrides` of its text config),
    built --text-only (the registry's packages always are): greedy genai tokens = HF generate through the class."""
    make = lambda folder: save_wrapped(folder, model_type, text_type, **(overrides or {}))  # noqa: E731
    facts = {"prompt": WRAPPED_PROMPTS[1], "prompts": WRAPPED_PROMPTS, "new_tokens": 24, **facts}
    return Family(name, "wrapped", make, genai_type=genai_type, generate_modes=("gqa",), since_major=5, **facts)


def multimodal(name: str, **facts: Any) -> Family:
    """A multimodal checkpoint's text decoder (tests/multimodal_models.py, variants.MULTIMODAL_VARIANTS)."""
    return Family(
        name, "multimodal", None, prompt=MULTIMODAL_PROMPT, prompts=MULTIMODAL_PROMPTS, generate_modes=ALL_MODES,
        **facts,
    )  # fmt: skip


# 4.57 initialises the tiny dots1 checkpoint with other random weights; on those, two of the 17
# positions' fp16 hidden states cross a near-tie of the top-3-of-12 router (|fp16 - HF| 1.72 and
# 1.37 there, <= 0.021 elsewhere; the fp32 package is within 1e-5 under 4.57 too)
DOTS1_FP16_UNDER_4X = "fp16 routing near-ties on 4.57's random weights (two expert flips)"
# the classic decoders' ragged batch: ORT logits in both single-graph modes too (positions from the mask)
CLASSIC_RAGGED: dict[str, Any] = dict(ragged_logits_modes=("gqa", "bias"), ragged_generate_modes=ALL_MODES)
# multi-head latent attention's ragged batch: ORT logits in both single-graph modes, genai's tokens in
# every mode and in the latent cache (docs/latent-attention.md)
LATENT_RAGGED: dict[str, Any] = dict(
    ragged_logits_modes=("gqa", "bias"), ragged_generate_modes=(*ALL_MODES, "gqa_latent")
)

# the families built on DeepSeek's latent attention: every mode and the latent cache, greedy tokens
# and the ragged batch (ORT logits row by row in both single-graph modes and in the latent cache)
LATENT_MODES = (*ALL_MODES, "gqa_latent")
LATENT_EVERY_FORM: dict[str, Any] = dict(
    ragged_logits_modes=("gqa", "bias", "gqa_latent"), ragged_generate_modes=LATENT_MODES
)

FAMILIES: tuple[Family, ...] = (
    # the Llama spec's variants (tests/variants.py LLAMA_VARIANTS, then FAMILY_VARIANTS)
    llama("gqa", "llama", LLAMA_MODES, ragged_generate_modes=LLAMA_MODES),
    llama("mha", "llama", ()),
    llama("mqa_tied", "llama"),
    llama("llama3_rope", "llama"),
    llama("linear_rope_bias", "llama", ()),
    llama("head_dim_32", "llama", ()),
    llama("bf16_sharded", "llama"),
    llama("mistral_window", "mistral", LLAMA_MODES, ragged_generate_modes=LLAMA_MODES),
    llama("qwen2_bias_window", "qwen2"),
    llama("qwen3_qk_norm", "qwen3"),
    llama("phi3_partial_rotary", "phi3"),
    # HF generate re-runs the whole sequence with the long factors at the step that crosses
    # original_max_position_embeddings (32; Phi3ForCausalLM drops its cache), which a decode graph
    # cannot: greedy tokens only for the prompt past it from the first step; the crossing is checked
    # against HF's incremental forward in tests/graph/test_decoder.py
    llama("phi3_longrope", "phi3", prompts=TEXT_PROMPTS[2:]),
    llama("gemma_head_dim_32", "gemma"),
    llama("gemma2_softcap_window", "gemma2", LLAMA_MODES, ragged_generate_modes=LLAMA_MODES),
    llama("gemma3_local_global", "gemma3_text"),
    llama("smollm3_nope", "smollm3"),
    llama("granite_multipliers", "granite"),
    llama("olmo2_post_norm", "decoder"),
    llama("llama_yarn", "llama"),
    # rotary dims GQA's fused RoPE refuses (24 of 32; head_dim 24), applied with plain ops before GQA
    llama(
        "phi3_rotary_24",
        "phi3",
        ("gqa", "bias"),
        make=lambda folder: save_model(folder, "phi3", hidden_size=128, partial_rotary_factor=0.75),
    ),
    llama("llama_head_dim_24", "llama", ("gqa", "bias"), make=lambda folder: save_model(folder, head_dim=24)),
    # second-wave dense families (tests/dense_models.py FAMILIES), then their variants (VARIANTS)
    dense_family("phi", genai_type="phi", fp16_cuda=True),
    dense_family("olmo", genai_type="olmo"),
    dense_family("olmo3"),
    dense_family("nemotron", genai_type="nemotron"),
    dense_family("stablelm"),
    dense_family("starcoder2", gathered_tables=TIED),
    dense_family("cohere", gathered_tables=TIED),
    dense_family("cohere2", gathered_tables=TIED, fp16_cuda=True),
    # Cohere-Compass's text decoder (5.25's class): Cohere2's parallel layers with rotate-half RoPE by layer type
    # (the full layers' rope_parameters null: NoPE there)
    dense_family("cohere_compass_text", gathered_tables=TIED, since_major=5, since=(5, 25), **SHORT_GENERATE),
    dense_family("glm4", fp16_cuda=True),
    dense_family("exaone4"),
    dense_family("ernie4_5", genai_type="ernie4_5", gathered_tables=TIED),
    dense_family("hunyuan_v1_dense", genai_type="hunyuandensev1", gathered_tables=TIED, fp16_cuda=True),
    dense_family("apertus", fp16_cuda=True, differs_under_4x=XIELU_BF16_UNDER_4X),
    # Apertus-1.5's text decoder (5.25's class): Apertus with its lm_head pruned to the first ids (320 of 384)
    dense_family("apertus1p5_text", logits_modes=(), since_major=5, since=(5, 25), **SHORT_GENERATE),
    # Llama-shaped families (tests/llama_like_models.py): a decoupled head_dim with q/k/v biases, a
    # non-gated squared-ReLU MLP with YaRN
    dense_family("seed_oss", **RAGGED_EVERY_MODE),
    dense_family("arcee", **RAGGED_EVERY_MODE),
    # issue #39 item 3 (gqa_export/arch/derived_families.py): every mode on logits and greedy tokens, int4, a
    # ragged batch where a row adds a position or attention mechanism (absolute positions, MQA, local windows);
    # marked from 5.x: the tiny configs are spelled for 5.x (EXAONE, InternLM3 and Solar-Open have no 4.x class)
    dense_family("exaone", generate_modes=ALL_MODES, since_major=5),  # the hub's tensor names and config keys
    dense_family("internlm3", generate_modes=ALL_MODES, since_major=5),
    dense_family("iquestcoder", generate_modes=ALL_MODES, since_major=5),
    dense_family("helium", generate_modes=ALL_MODES, since_major=5),
    dense_family("vaultgemma", generate_modes=ALL_MODES, gathered_tables=TIED, fp16_cuda=True, since_major=5),
    dense_family("ministral", genai_type="mistral", generate_modes=ALL_MODES, since_major=5),
    dense_family("glm", generate_modes=ALL_MODES, fp16_cuda=True, since_major=5),
    dense_family("cwm", generate_modes=ALL_MODES, since_major=5),
    classic_moe("solar_open", generate_modes=ALL_MODES, since_major=5),
    dense_family(
        "nanochat", generate_modes=ALL_MODES, since_major=5, **RAGGED_TWO_MODES
    ),  # mutants: tests/arch/test_derived_mutants.py
    # BitNet b1.58's float checkpoint (the packed ternary one: tests/source/test_prequant_bitnet.py);
    # mutants: tests/arch/test_derived_mutants.py
    dense_family("bitnet", generate_modes=ALL_MODES, fp16_cuda=True, since_major=5, **RAGGED_TWO_MODES),
    # issue #39's classic-lineage families (gqa_export/arch/classic_derived_families.py; mutants in
    # tests/arch/test_classic_derived.py)
    # (cheap rows: greedy tokens for the long prompt, or the 7- and 30-token ones where positions come from the
    # mask, 24 tokens each; a ragged batch through ORT in gqa, and where positions come from the mask (CTRL's
    # sinusoids, GPT-1's table) in both single-graph modes, with genai's tokens for CTRL (GPT-1's HF class has
    # no cache and re-runs every sequence whole))
    dense_family(
        "jais2", prompts=PROMPTS[2:], new_tokens=24, since_major=5, since=(5, 25), ragged_logits_modes=("gqa",)
    ),
    dense_family(
        "gpt_neox_japanese",
        prompts=PROMPTS[2:],
        new_tokens=24,
        gathered_tables=frozenset({"gpt_neox_japanese.embed_in.qweight"}),
        since_major=5,
        ragged_logits_modes=("gqa",),
    ),
    dense_family(
        "ctrl", prompts=PROMPTS[1:], new_tokens=24, generate_modes=ALL_MODES, since_major=5, **RAGGED_TWO_MODES
    ),
    dense_family(
        "openai-gpt",
        prompts=PROMPTS[1:],
        new_tokens=24,
        generate_modes=ALL_MODES,
        since_major=5,
        ragged_logits_modes=("gqa", "bias"),
    ),
    dense_family(
        "modernbert-decoder",
        prompts=PROMPTS[2:],
        new_tokens=24,
        gathered_tables=frozenset({"model.embeddings.tok_embeddings.qweight"}),
        since_major=5,
        ragged_logits_modes=("gqa",),
    ),
    # Granite's multipliers with sinks, sliding layers and a RoPE base per layer (one NoPE): the sinks need
    # GroupQueryAttention (bias and split refused in one line), so gqa only; mutants: test_derived_mutants.py
    dense_family(
        "granite_swa",
        logits_modes=(),
        since_major=5,
        since=(5, 25),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
    ),
    # Granite's multipliers with each block's output normed before the add and the logits multiplied by
    # logits_scaling; and without those norms (use_post_norm false); mutants: test_derived_mutants.py
    dense_family("hyperclovax", generate_modes=ALL_MODES, since_major=5, since=(5, 25), **RAGGED_TWO_MODES),
    dense("hyperclovax_no_post_norm", logits_modes=(), since_major=5, since=(5, 25)),
    # differential attention on one GQA with 2D-wide heads: gqa only (bias and split refused in one line);
    # mutants: test_derived_mutants.py
    dense_family(
        "diffllama", logits_modes=(), since_major=5, ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa",)
    ),
    # dynamic mask attention (each key's bias carried in its cached value), residual vectors: gqa only
    # (bias and split refused in one line); context capped at keep_window_size; mutants: test_derived_mutants.py
    dense_family("doge", logits_modes=(), since_major=5, ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa",)),
    # two weight-shared stacks of 2 layers run H_cycles 2 x (L_cycles 2 + 1) times over two streams, unrolled into
    # 12 graph layers (one KV cache each, the shared weights written once), MHA with a per-channel sigmoid output
    # gate, weightless norms, embeddings x embedding_scale; every mode; mutants: test_recurrent_stacks.py
    dense_family("hrm_text", generate_modes=ALL_MODES, since_major=5, since=(5, 25), **RAGGED_TWO_MODES),
    # nGPT layers (weightless L2 norms, interpolated residuals, per-channel query / gate / MLP / logit scales) and
    # a middle stack of 2 layers run 3 times, unrolled into 8 graph layers (one KV cache per pass, HF's per_loop
    # order, the shared weights written once); the released config.json spelling (attention and mlp blocks in
    # layer_types, the counts doubled) and the hub's tensor names; every mode; mutants: test_dory.py
    dense_family("dory", generate_modes=ALL_MODES, since_major=5, since=(5, 25), **RAGGED_TWO_MODES),
    # the last_loop cache mode: 4 caches (one per stored layer), the earlier passes reading the last pass's
    # without writing it (a GroupQueryAttention whose present is not an output); every mode
    dense("dory_last_loop", generate_modes=ALL_MODES, since_major=5, since=(5, 25), **RAGGED_TWO_MODES),
    # classics (tests/classic_models.py): multi-query GPT-2 layout, per-head qkv with q/k LayerNorms, OPT positions
    dense_family(
        "gpt_bigcode",
        generate_modes=ALL_MODES,
        gathered_tables=frozenset({"transformer.wte.qweight"}),
        since_major=5,
        **RAGGED_TWO_MODES,
    ),
    dense("gpt_bigcode_mha", generate_modes=ALL_MODES, since_major=5),
    dense_family("persimmon", generate_modes=ALL_MODES, smoke_meets_eos=frozenset({5}), since_major=5),
    dense_family("biogpt", generate_modes=ALL_MODES, since_major=5, **RAGGED_TWO_MODES),
    dense_family(
        "gpt_neo",
        generate_modes=ALL_MODES,
        gathered_tables=frozenset({"transformer.wte.qweight"}),
        since_major=5,
        **RAGGED_TWO_MODES,
    ),
    dense_family("xglm", generate_modes=ALL_MODES, gathered_tables=TIED, since_major=5, **RAGGED_TWO_MODES),
    # their mixtures of experts, routers computed as dense weights for MoE / QMoE: group-limited
    # sigmoid choice with a selection bias (GLM-4-MoE)
    classic_moe("glm4_moe", **RAGGED_EVERY_MODE),
    classic_moe("ernie4_5_moe", gathered_tables=TIED, **RAGGED_EVERY_MODE),  # softmax choice with a selection bias
    classic_moe("hunyuan_v1_moe", gathered_tables=TIED, **RAGGED_EVERY_MODE),  # softmax top k beside a shared MLP
    # Qwen3 attention with sliding layers and GLM-4-MoE's routing (dots.llm1; tests/arch/test_dots1.py)
    classic_moe(
        "dots1",
        one_token_logits=True,
        fp16_cuda=True,
        fp16_differs_under_4x=DOTS1_FP16_UNDER_4X,
        **RAGGED_EVERY_MODE,
    ),
    dense("phi_qkln", genai_type="phi"),
    dense("stablelm_par_qkln", differs_under_4x=PARALLEL_QK_LN_UNDER_4X),
    dense("cohere_qknorm"),
    dense("ernie4_5_bias", genai_type="ernie4_5"),
    dense("exaone4_nosliding"),
    dense("olmo_noclip", genai_type="olmo"),
    # the classic decoders (tests/classic_models.py; their own checks in tests/arch/test_classics.py): learned
    # absolute positions and Conv1D weights (GPT-2), qkv stored per head and the parallel residual with
    # two norms (GPT-NeoX), positions offset by 2 and ReLU (OPT), partial interleaved RoPE (GPT-J)
    # (their positions counted from attention_mask: a ragged batch through ORT in both single-graph modes)
    dense_family("gpt2", gathered_tables=frozenset({"transformer.wte.qweight"}), **CLASSIC_RAGGED),
    dense_family("gpt_neox", **CLASSIC_RAGGED),
    dense_family("opt", gathered_tables=frozenset({"model.decoder.embed_tokens.qweight"}), **CLASSIC_RAGGED),
    dense_family("gptj", **CLASSIC_RAGGED),
    # hybrid decoders: short-convolution state + GQA layers (the state lives in the GQA graph only)
    # short-convolution state + GQA layers (LFM2), with sigmoid-routed experts (LFM2-MoE)
    hybrid(
        "lfm2",
        genai_type="lfm2",
        quantized=("int4",),
        fp16_cuda=True,
        gathered_tables=TIED,
        generate_differs_under_4x=LFM2_CACHED_GENERATE_UNDER_4X,
    ),
    hybrid("lfm2_bias", genai_type="lfm2", generate_differs_under_4x=LFM2_CACHED_GENERATE_UNDER_4X),
    hybrid(
        "lfm2_moe",
        genai_type="lfm2_moe",
        quantized=("int4", "int8"),
        accuracy_level=0,
        int8_relative_l2=0.3,
        experts="fused",
        gathered_tables=TIED,
        since_major=5,
    ),
    # LFM2's conv layers with sliding and full GQA layers, a sigmoid gate per head, sandwich norms, a
    # proportional partial rope on the full layers; and without the norms and gates (5.25's class;
    # mutants: tests/arch/test_derived_mutants.py)
    hybrid("lfm3", genai_type="lfm2", quantized=("int4",), gathered_tables=TIED, since_major=5, since=(5, 25)),
    dense("lfm3_plain", genai_type="lfm2", logits_modes=(), since_major=5, since=(5, 25)),
    # gated-DeltaNet (conv + recurrent state) + gated GQA layers, and with experts (Qwen3.5, -MoE)
    hybrid(
        "qwen3_5_text",
        genai_type="qwen3_5_text",
        quantized=("int4",),
        prompt=LONG_PROMPT,
        fp16_cuda=True,
        since_major=5,
    ),
    hybrid(
        "qwen3_5_moe_text",
        genai_type="qwen3_5_moe_text",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        prompt=LONG_PROMPT,
        since_major=5,
    ),
    # Qwen3.5-MoE's layers with the DeltaNet projections fused per key head, a dense MLP on an
    # mlp_only_layers layer, top-k weights not renormalized (Qwen3-Next; genai 0.18 has no type of
    # its own: the generic decoder). Marked from 5.x as the Qwen3.5 rows are: the tiny config is
    # spelled for 5.x and was not checked under 4.57's qwen3_next
    hybrid(
        "qwen3_next",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        smoke_meets_eos=frozenset({5}),
        prompt=LONG_PROMPT,
        since_major=5,
    ),
    # OLMo-3's post-norm attention layers + pre-norm gated-DeltaNet layers with separate q/k/v
    # projections and beta = 2 sigmoid(b) (OLMo-Hybrid; genai 0.18 has no type of its own: the
    # generic decoder), and as released: NoPE, beta = sigmoid(b)
    # Qwen3.5's DeltaNet layers (the hub's stacked in_proj) between ungated GQA layers, sliding with RoPE and
    # full without, plain RMSNorms, experts on every layer beside an ungated shared expert (Lara-Mini, 5.25;
    # tests/arch/test_hybrid_lara_mini.py)
    hybrid(
        "lara_mini",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        gathered_tables=TIED,
        prompt=LONG_PROMPT,
        prompts=PROMPTS[:2],  # 1 and 7 tokens, 20 greedy each: past its window of 8 (its logits: the 70-token prompt)
        new_tokens=20,
        ragged_generate_modes=(),  # HF's generate of its DeltaNet on the ragged rows is slow; ORT's logits check them
        since_major=5,
        since=(5, 25),
    ),
    # Qwen4-Exp's text decoder (5.25): Qwen3.5-MoE's layers on 3 hyper-connection copies in the gated form (no
    # input or final norms), the QSA indexer's cap at 124 (budget 120, blocks of 5), no PLE layers (refused);
    # mutants and the cap: tests/arch/test_qwen4_exp.py
    hybrid(
        "qwen4_exp_text",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        float_matmuls=True,  # the stream maps stay float32 MatMuls in int4 packages
        prompt=LONG_PROMPT,
        one_token_logits=True,
        fp16_cuda=True,
        since_major=5,
        since=(5, 25),
        **ONE_PROMPT,  # the 30-token prompt + 24 greedy tokens (54: within the cap)
    ),
    hybrid("olmo_hybrid", quantized=("int4",), prompt=LONG_PROMPT, fp16_cuda=True, since_major=5),
    hybrid("olmo_hybrid_nope", prompt=LONG_PROMPT, since_major=5),
    # lightning attention (linear attention with a fixed decay per head and layer: one recurrent
    # state and the runtime's one-element conv placeholder) + GQA layers, Mixtral's experts on every
    # layer, each block added to its normed input with alpha / beta (MiniMax; genai 0.18 has no type
    # of its own: the generic decoder). Marked from 5.x: the tiny config is spelled for 5.x
    hybrid(
        "minimax",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        prompt=LONG_PROMPT,
        one_token_logits=True,
        fp16_cuda=True,
        since_major=5,
    ),
    # KDA layers (Kimi Delta Attention: per-channel decay, q/k/v convs, sigmoid-gated norm) + NoPE latent
    # attention layers, a dense MLP then DeepSeek-V3's grouped biased-sigmoid experts (Kimi-Linear, in the
    # hub's layout: tests/kimi_models.py; genai 0.18 has no type of its own: the generic decoder; mutants:
    # tests/arch/test_hybrid_kimi_linear.py)
    Family(
        "kimi_linear",
        "dense",
        save_kimi_linear,
        signal=0.5,
        prompt=LONG_PROMPT,
        generate_modes=("gqa", "gqa_latent"),
        ragged_logits_modes=("gqa", "gqa_latent"),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        fp16_cuda=True,
        since_major=5,
    ),
    # Ling 3: KDA layers with a bounded forget gate and full-rank f/g projections + latent attention with RoPE
    # pairs and a sigmoid gate per head, a dense MLP then DeepSeek-V3's grouped experts whose SwiGLU (routed,
    # shared) is clipped after the activation at per-layer limits, in the hub's names (bailing_hybrid; genai
    # 0.18 has no type of its own: the generic decoder; mutants: tests/arch/test_hybrid_bailing.py)
    dense(
        "bailing_hybrid",
        prompt=LONG_PROMPT,
        new_tokens=16,  # HF's reference KDA and experts run as python loops
        fp16_cuda=True,
        logits_modes=(),
        generate_modes=("gqa", "gqa_latent"),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        since_major=5,
    ),
    # Mamba2 (conv + SSM state) + NoPE GQA layers, top-k experts with a shared MLP (Granite-4.0-H)
    hybrid(
        "granitemoehybrid",
        genai_type="granitemoehybrid",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        prompt=LONG_PROMPT,
        differs_under_4x=GRANITE_HYBRID_UNDER_4X,
        generate_differs_under_4x=GRANITE_HYBRID_UNDER_4X,
    ),
    # Mamba (v1: conv + per-channel SSM state) + NoPE GQA layers, experts every third layer (Jamba)
    hybrid(
        "jamba",
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        prompt=LONG_PROMPT,
        differs_under_4x=JAMBA_CACHE_UNDER_4X,
    ),
    # attention and Mamba2 side by side in every layer (a KV cache and conv + SSM state each), µP
    # multipliers (Falcon-H1)
    hybrid(
        "falcon_h1", quantized=("int4",), prompt=LONG_PROMPT, fp16_cuda=True, differs_under_4x=FALCON_H1_CACHE_UNDER_4X
    ),
    # one block per layer: Mamba2, NoPE GQA or a squared-ReLU MLP (Nemotron-H; 5.x spells its pattern
    # layers_block_type, 4.57 hybrid_override_pattern with other block names)
    hybrid("nemotron_h", quantized=("int4",), prompt=LONG_PROMPT, fp16_cuda=True, since_major=5),
    # Nemotron-H's mixture-of-experts layers too: ungated squared-ReLU experts as two plain MatMuls over
    # every expert (MatMulNBits in int4 and int8) under a grouped biased-sigmoid router, a shared expert;
    # the fp16 CUDA graph too
    hybrid("nemotron_h_moe", quantized=("int4", "int8"), prompt=LONG_PROMPT, fp16_cuda=True, since_major=5),
    # state-space families (tests/state_space_models.py): Mamba2 layers between GQA layers with RoPE on half
    # of each head, a SwiGLU MLP on every layer (Bamba; genai 0.18 has no type of its own: the generic decoder)
    state_space("bamba", fp16_cuda=True),
    # a Mamba2 mixer on every layer and no attention: recurrent state only, no KV cache (Mamba2)
    state_space("mamba2", fp16_cuda=True),
    # Jamba's Mamba (v1) mixer on every layer and no attention, tied embeddings (Mamba); with weightless
    # RMSNorms on dt, B and C at their own eps (Falcon-Mamba)
    state_space("mamba", fp16_cuda=True, gathered_tables=frozenset({"backbone.embeddings.qweight"})),
    state_space("falcon_mamba", fp16_cuda=True, gathered_tables=frozenset({"backbone.embeddings.qweight"})),
    # Mamba2 on every layer, and at the "hybrid" layers two shared attention + MLP blocks (alternating)
    # on [hidden | embeddings] with per-use adapters, each use its own KV cache (Zamba2)
    state_space("zamba2", fp16_cuda=True, gathered_tables=TIED),
    # Mamba (v1) in heads (each its own x_proj, dt_proj, B and C) and one shared block, no adapters (Zamba)
    state_space("zamba", fp16_cuda=True, gathered_tables=TIED, float_matmuls=True),
    # RG-LRU blocks (conv + a scalar state per channel) beside local MQA (window 8 < the 70-token prompt)
    # with RoPE on half of each head; the gates' 3-D block-diagonal weights stay float (RecurrentGemma)
    state_space("recurrent_gemma", fp16_cuda=True, gathered_tables=TIED, float_matmuls=True, one_token_logits=True),
    # RWKV-4 blocks (token shift, the WKV recurrence as an exact Scan, the squared-ReLU channel mix), no
    # attention, rescaled every 2 blocks: recurrent state only, a float32 WKV state in the fp16 graph too
    state_space("rwkv", fp16_cuda=True, fp32_recurrent_state=True),
    # xLSTM blocks: an mLSTM (matrix memory, exponential input gate, max stabilizer, as an exact Scan) and a
    # SwiGLU MLP, no attention; the prompt against HF's chunkwise kernel (chunks of 16, then single steps)
    state_space("xlstm", fp16_cuda=True),
    # the classic decoders (issue #24): fused query_key_value weights taken apart as data. Falcon-7B
    # (multi-query, parallel, tied), the 40B layout (kv groups, two norms, biases), a sequential one
    dense_family("falcon", gathered_tables=CLASSIC_TIED, ragged_generate_modes=("gqa", "bias")),
    dense(
        "falcon_grouped",
        generate_modes=("gqa",),
        quantized=("int4",),
        gathered_tables=CLASSIC_TIED,
        ragged_generate_modes=("gqa", "split"),
    ),
    dense("falcon_sequential"),
    # ALiBi (mode bias only: GroupQueryAttention takes no per-head bias; gqa and split are refused)
    # (a ragged batch also in the concatenating cache: key positions from the mask's cumsum)
    dense_family("bloom", **ALIBI, ragged_generate_modes=("bias", "bias_growing")),
    dense_family(
        "mpt", **ALIBI, gathered_tables=frozenset({"transformer.wte.qweight"}), ragged_generate_modes=("bias",)
    ),
    # parallel block, qkv_proj as four q | v | k blocks, GPT-J RoPE on 8 of 16 channels, lm_head bias
    dense_family("codegen", ragged_generate_modes=("gqa", "split")),
    # mixtures of experts (tests/moe_models.py FAMILIES) in the hub layout (experts one by one) ...
    moe_family("qwen3_moe", fp16_cuda=True),
    moe_family("qwen2_moe", ALL_MODES),
    moe_family("mixtral", ALL_MODES),
    moe_family("gpt_oss", genai_type="gptoss", fp16_cuda=True),
    moe_family("olmoe"),
    moe_family("granitemoe", gathered_tables=TIED),
    moe_family("phimoe", ALL_MODES, genai_type="phimoe", generate_differs_under_4x=LONGROPE_SWITCH_UNDER_4X),
    # Gemma-4's MoE: experts in plain ops (float in int4/int8 packages)
    moe_family("gemma4_text", since_major=5, genai_type="gemma4_text", experts="plain", gathered_tables=TIED),
    # multi-head latent attention cached as expanded K/V, shared experts, a dense first layer: V2-Lite-like
    # (no q-LoRA, softmax greedy top-k) and V3 (q-LoRA, sigmoid grouped top-k with a selection bias,
    # YaRN mscale). genai 0.18 has no type of their own: the generic decoder. Compared under 5.x only:
    # the tiny configs are spelled for 5.x and were not checked under 4.57's classes
    moe_family("deepseek_v2", ALL_MODES, since_major=5, **LATENT_RAGGED),
    moe_family("deepseek_v3", ALL_MODES, since_major=5, **LATENT_RAGGED),
    # issue #39 item 3, latent attention built on DeepSeek's (gqa_export/arch/latent_families.py; mutants:
    # tests/arch/test_latent_mutants.py): greedy tokens in every mode and in the latent cache, the ragged
    # batch's ORT logits in the latent cache too, the fp16 CUDA graph. MiniCPM3: dense layers, rotate-half rope, scaled
    # embeddings, residual branches and logits (tests/llama_like_models.py)
    dense_family("minicpm3", generate_modes=LATENT_MODES, fp16_cuda=True, since_major=5, **LATENT_EVERY_FORM),
    # Sarvam-MLA: DeepseekV3ForCausalLM under its own model_type (no q-LoRA, one expert group, YaRN)
    moe_family("sarvam_mla", LATENT_MODES, fp16_cuda=True, since_major=5, **LATENT_EVERY_FORM),
    # GLM-4-MoE-Lite: q-LoRA, values as wide as keys (no padding), grouped sigmoid routing (2 of 4 groups),
    # experts on the layers mlp_layer_types marks sparse (sparse, dense, sparse)
    moe_family("glm4_moe_lite", LATENT_MODES, fp16_cuda=True, since_major=5, **LATENT_EVERY_FORM),
    # DeepSeek-V3.2: V3's tiny shape with a lightning indexer keeping 128 keys, past every context here (the
    # package's max_length is capped at 128: tests/arch/test_latent_families.py), so HF runs plain MLA
    moe_family("deepseek_v32", LATENT_MODES, fp16_cuda=True, since_major=5, **LATENT_EVERY_FORM),
    # GLM-MoE-DSA (5.25's class): V3.2's cap at index_topk 128, an indexer-sharing layer, one expert group
    moe_family("glm_moe_dsa", since_major=5, since=(5, 25), logits_modes=("bias",), **ONE_PROMPT, **RAGGED_LOGITS),
    # LongCat-Flash: two MLA sublayers per layer (4 KV caches for 2 layers; lora-scaled query and latent),
    # a shortcut MoE added a sublayer later, 4 zero (identity) experts beside 8 real ones, softmax routing
    # with a selection bias, not renormalized (mutants: tests/arch/test_longcat_flash.py)
    moe_family("longcat_flash", LATENT_MODES, fp16_cuda=True, since_major=5, **LATENT_EVERY_FORM),
    # Youtu-LLM (5.25's class): DeepSeek-V3's latent attention (q-LoRA, rope pairs, YaRN mscale) in dense Llama
    # layers; a cheap row (V3's attention and MiniCPM3's dense layers are checked in every form above)
    dense_family(
        "youtu", generate_modes=("gqa", "gqa_latent"), since_major=5, since=(5, 25), **ONE_PROMPT, **RAGGED_LOGITS
    ),
    # A.X-K1 (5.25's class): DeepSeek-V3 with an RMSNorm over the sparse block's output (hub: post_mlp_layernorm at
    # the layer; transformers 5.x saves it under mlp.); mutant: tests/arch/test_latent_mutants.py
    moe_family("axk1", since_major=5, since=(5, 25), logits_modes=("bias",), **ONE_PROMPT, **RAGGED_LOGITS),
    moe("axk1_v5", "axk1", hub_layout=False, since_major=5, since=(5, 25)),
    # Mistral-4 (5.25's class): DeepSeek-V3's latent attention with Ministral-3's per-position query scale, stepping
    # every 8 positions (inside the prompt, its decode steps, the ragged rows), on the expanded and the latent
    # cache's absorbed queries; V3's grouped choice on softmax probabilities (mutants: tests/arch/test_mistral4.py)
    moe_family(
        "mistral4",
        ("gqa", "gqa_latent"),
        since_major=5,
        since=(5, 25),
        logits_modes=("bias",),
        **ONE_PROMPT,
        **RAGGED_LOGITS,
    ),
    # A.X-K2 (5.25's class): V3.2's cap at index_topk 128 with q_b reading [normed | raw] q latent and yielding a
    # value gate, GatedRMSNorms, ungrouped sigmoid routing (hub: q_b_proj, W_down / W_up, per-expert tensors;
    # transformers 5.x: q_gate_proj, mlp.fc1 / fc2, fused experts); mutants: tests/arch/test_axk2.py
    moe_family(
        "axk2",
        ("gqa", "gqa_latent"),
        since_major=5,
        since=(5, 25),
        logits_modes=STANDARD_MODES,
        ragged_logits_modes=("gqa", "gqa_latent"),
        **ONE_PROMPT,
    ),
    moe("axk2_v5", "axk2", hub_layout=False, since_major=5, since=(5, 25)),
    # the larger releases' grouped routing (n_group / topk_group set: DeepSeek-V3's group scores)
    moe("axk2_grouped", "axk2", overrides={"n_group": 4, "topk_group": 2}, since_major=5, since=(5, 25)),
    # HunYuan-V4 (5.25's class): V3.2's cap at index_topk 128 (a shared indexer layer) with a sink per head (gqa
    # and the latent cache; the standard-Attention modes refused), a value gate from gate_proj, the routed SwiGLU
    # clamped, 3 hyper-connection copies (hub: learnable_sink_param, linear_gate, hc_pre.hc_*_layer.hc_*;
    # transformers 5.x: sinks, gate_proj, attn_hc / ffn_hc); mutants: tests/arch/test_hy_v4.py
    moe_family(
        "hy_v4",
        ("gqa", "gqa_latent"),
        since_major=5,
        since=(5, 25),
        ragged_logits_modes=("gqa", "gqa_latent"),
        ragged_generate_modes=("gqa", "gqa_latent"),
        float_matmuls=True,  # the stream maps stay float32 MatMuls in int4 / int8 packages, as HF keeps them
        fp16_cuda=True,
        **ONE_PROMPT,
    ),
    moe("hy_v4_v5", "hy_v4", hub_layout=False, since_major=5, since=(5, 25)),
    # DeepSeek-V4: a sliding, a CSA and an HCA layer (the compressed keys recomputed each step from cached rows, plain
    # ops; the context capped at index_topk x 4), one KV head as key and value, trailing RoPE rotated back on the
    # output, sinks (gqa only), a grouped low-rank output projection, Sinkhorn-mixed hyper-connection copies, a
    # hash-routed layer (tid2eid on the input ids) and sqrt(softplus) experts, routed and shared SwiGLU clipped;
    # save_pretrained's default layout (the reference names: attn.wq_a, ffn.experts.{e}.w1, hc_attn_fn, head) and
    # transformers' own (_v5)
    moe_family(
        "deepseek_v4",
        ("gqa",),
        since_major=5,
        since=(5, 25),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        float_matmuls=True,  # the stream maps stay float32 MatMuls in int4 / int8 packages, as HF keeps them
        fp16_cuda=True,
        **ONE_PROMPT,
    ),
    moe("deepseek_v4_v5", "deepseek_v4", hub_layout=False, since_major=5, since=(5, 25)),
    # dots3-note's decoder: DeepSeek-V3.2's MLA with its own shapes on the sliding layer (per_layer_config: a KV
    # cache of its own shape), lora scales, a normed rope key, a per-head output gate (mutants:
    # tests/arch/test_dots3_note.py); transformers' own fused expert layout
    moe_family(
        "dots3_note_text",
        LATENT_MODES,
        since_major=5,
        since=(5, 25),
        hub_layout=False,
        ragged_logits_modes=("gqa",),
        new_tokens=24,  # suite time: HF generate runs the indexer eagerly
    ),
    # transformers 5.x's own layout: fused experts whose gate_up_proj has a row per zero expert too
    # ([E + Z, 2I, H]; no expert reads them) and down_proj E rows
    moe("longcat_flash_v5", "longcat_flash", hub_layout=False, since_major=5),
    # chunked local attention on RoPE layers, NoPE layers with temperature tuning, scaleless q/k norms,
    # top-1 sigmoid experts scaling their input beside dense layers (Llama-4; tests/arch/test_llama4.py).
    # GroupQueryAttention cannot mask chunks: mode bias only (gqa and split refused)
    Family(
        "llama4",
        "moe",
        save_llama4,
        logits_mode="bias",
        logits_modes=("bias",),
        generate_modes=("bias",),
        quantized=("int4", "int8"),
        accuracy_level=0,
        int8_relative_l2=0.3,
        experts="fused",
        since_major=5,
        # chunks and the NoPE layers' temperature counted from each row's own first token, in the
        # three forms of mode bias that read the cache differently
        ragged_generate_modes=("bias", "bias_gqa", "bias_growing"),
    ),
    # ... and transformers 5.x's own fused [E, 2I, H] layout
    moe("qwen3_moe_norm_v5", "qwen3_moe", hub_layout=False, overrides={"norm_topk_prob": True}, since_major=5),
    moe("mixtral_v5", "mixtral", hub_layout=False, since_major=5),
    moe("phimoe_v5", "phimoe", hub_layout=False, genai_type="phimoe", since_major=5),
    moe("granitemoe_v5", "granitemoe", hub_layout=False, since_major=5),
    # Gemma-4's three checkpoint forms and a second feature mix
    gemma4(
        "gemma4_causal",
        quantized=("int8", "int4"),
        accuracy_level=0,
        int8_relative_l2=0.25,
        gathered_tables=TIED | {"model.embed_tokens_per_layer.qweight"},
        fp16_cuda=True,
    ),
    gemma4("gemma4_conditional"),
    gemma4("gemma4_unified", fp16_cuda=True),
    gemma4("gemma4_unified_text"),
    gemma4("gemma4_mix_bf16"),
    # Gemma-3n: alternating updates, LAuReL, gate sparsity, KV sharing, per-layer embeddings; the
    # conditional form's vision/audio control ids through their own embedders (genai: decoder)
    gemma3n(
        "gemma3n_causal",
        "causal",
        quantized=("int4",),
        gathered_tables=TIED | {"model.embed_tokens_per_layer.qweight"},
        fp16_cuda=True,
    ),
    gemma3n("gemma3n_conditional", "conditional"),
    # the text decoders of multimodal checkpoints
    # classes around an exported decoder whose towers are not built (arch/wrapped_decoders.py; every
    # listed class against HF: tests/arch/test_wrapped_decoders.py)
    wrapped("llava_text_only", "llava", "llama", "llama"),
    wrapped("internvl_text_only", "internvl", "qwen2", "qwen2"),
    wrapped("aya_vision_text_only", "aya_vision", "cohere2", "decoder", signal=0.5),  # logit_scale 0.5
    # a spec of its own (arch/wrapped_families.py): Llama's attention, a relu2 fc1 / fc2 MLP, the hub's names
    wrapped("cosmos3_edge_text_only", "cosmos3_edge", "cosmos3_edge_text", "decoder"),
    # Chameleon's decoder with swin_norm (its norms after their blocks): per-head q/k LayerNorms, its image tokens'
    # logits masked (greedy tokens differ unmasked); its mutants: tests/arch/test_wrapped_decoders.py
    wrapped("chameleon_text_only", "chameleon", "chameleon", "decoder", {"swin_norm": True}, quantized=("int4",)),
    # Kosmos-2's decoder (a spec of its own, XGLM's layers with two sub-LayerNorms, positions from pad_token_id + 1);
    # HF's generate through the class runs its text model on ids alone; its mutants: tests/arch/test_kosmos2.py
    wrapped("kosmos2_text_only", "kosmos-2", "kosmos_2_text_model", "decoder"),
    # Molmo2's choices off their defaults (OLMo's q/k norms, post-norm, YaRN on layer 1 only), its release's layout
    wrapped("molmo2_text_only", "molmo2", "molmo2_text", "decoder"),
    # Mistral-Large-4's decoder (its own spec, latent_families.py) under the hub's Mistral-native names: a NoPE layer,
    # a layer reading an earlier one's latent cache, LeRoPE, per-head log-position query scales, logits capped at 3
    # (mutants: tests/arch/test_mistral_large4.py)
    # (12 new tokens: HF's generate through the class, 4 MLA + MoE layers, is the row's cost)
    wrapped("mistral_large4_text_only", "mistral_large4", "mistral_large4_text", "decoder", signal=0.5, new_tokens=12),
    # GLM-5-Next's decoder (no causal-LM class of its own): a KDA layer and a NoPE latent one on Sinkhorn
    # hyper-connection copies, every SwiGLU clipped; its mutants, cap and refusals: tests/arch/test_glm5_next.py
    # (one prompt's 16 greedy tokens: HF's generate over its reference KDA kernels is the row's slowest check)
    wrapped("glm5_next_text_only", "glm5_next", "glm5_next_text", "decoder", since=(5, 25), **ONE_WRAPPED_PROMPT),
    # ERNIE-4.5-VL's text expert set (dense, then 2 sparse layers of 2 sets 32 / 16 wide) in the hub's layout
    wrapped("ernie4_5_vl_text_only", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "decoder"),
    # Muse-Glimmer's decoder (a spec of its own): Gemma-2's layers, AFMoE's gate, scaleless q/k norms times
    # qk_scale_factor, a NoPE full layer, a normed embedding table, placeholders as id 0; its mutants:
    # tests/arch/test_wrapped_decoders.py
    wrapped("muse_glimmer_text_only", "muse_glimmer", "muse_glimmer_text", "decoder"),
    # Step3p7's decoder (step3p5, a spec of its own) in transformers' names (the release's: test_wrapped_decoders):
    # Laguna's layers with Gemma norms, a sigmoid gate, sliding layers' own heads, every SwiGLU clipped; its
    # mutants: tests/arch/test_step3p7.py
    wrapped(
        "step3p7_text_only", "step3p7", "step3p5", "decoder", {"hub_layout": False}, since=(5, 25), **ONE_WRAPPED_PROMPT
    ),
    # Muse-Spark's decoder (a replace() of Muse-Glimmer's): head output norms, input-scaled post-feedforward norms,
    # residual gates with a temperature and a floor, a dense layer and a sparse one of pooled normed experts; its
    # mutants: tests/arch/test_wrapped_decoders.py
    wrapped("muse_spark_text_only", "muse_spark", "muse_spark_text", "decoder", since=(5, 25)),
    multimodal(
        "gemma3_vision",
        genai_type="gemma3_text",
        quantized=("int4",),
        gathered_tables=frozenset({"language_model.model.embed_tokens.qweight"}),
        smoke_meets_eos=frozenset({5}),
    ),
    multimodal("gemma3_vision_v5_softcap", genai_type="gemma3_text"),
    multimodal("ministral3_vision", since_major=5, genai_type="mistral", quantized=("int4",)),
    multimodal("mistral3_vision_v5", genai_type="mistral"),
    multimodal("qwen2_5_vl", genai_type="qwen2"),
    multimodal("qwen2_5_vl_flat", genai_type="qwen2"),
    # Qwen2-VL's decoder as the released configs are written (its full package: test_qwen_full_package.py)
    multimodal("qwen2_vl_flat", genai_type="qwen2"),
    multimodal(
        "qwen3_vl_v5",
        genai_type="qwen3",
        quantized=("int4",),
        gathered_tables=frozenset({"model.language_model.embed_tokens.qweight"}),
    ),
    # Qwen3-VL-MoE's decoder in the hub's transposed expert layout (its full package with images:
    # tests/package/multimodal/test_qwen_full_package.py)
    multimodal(
        "qwen3_vl_moe",
        genai_type="decoder",
        experts="fused",
        quantized=("int4",),
        gathered_tables=frozenset({"model.language_model.embed_tokens.qweight"}),
        since_major=5,
        fp16_cuda=True,
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
    ),
    # issue #39 item 3, mixtures of experts as another family's layers with a mechanism changed
    # (tests/derived_moe_models.py; mutants: tests/arch/test_derived_moe_mutants.py): every mode on
    # greedy tokens and a ragged batch, int4 and int8 (QMoE). Marked from 5.x: the tiny configs are
    # spelled for 5.x
    moe_family("granitemoeshared", ALL_MODES, gathered_tables=TIED, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    moe_family("flex_olmo", ALL_MODES, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    moe_family("cohere2_moe", ALL_MODES, gathered_tables=TIED, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    # RMSNorms (rms_norm_eps set), the shared expert summed, a dense global layer without RoPE
    moe("cohere2_moe_rms", "cohere2_moe", overrides=COHERE2_MOE_RMS, generate_modes=("gqa",), since_major=5),
    moe_family(
        "cohere2_moe_sigmoid", family="cohere2_moe", overrides=COHERE2_MOE_SIGMOID, gathered_tables=TIED, since_major=5
    ),
    moe_family("exaone_moe", ALL_MODES, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    # transformers 5.x's own layout: fused [E, 2I, H] experts, the selection bias under mlp.gate.
    moe("exaone_moe_v5", "exaone_moe", hub_layout=False, since_major=5),
    moe_family("dbrx", ALL_MODES, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    moe_family("jetmoe", ALL_MODES, since_major=5, **RAGGED_EVERY_MODE),
    # GLM-4-MoE's layers in the hub's Bailing names (a stacked query_key_value with biases), full RoPE.
    # Seed 0's fp16 hidden states cross a near-tie of its top-3-of-12 router at 2 of 17 positions
    # (0.28 / 0.47 off there; docs/coverage.md §5): the fp16 CUDA graph is checked on seed 1's weights
    moe_family("sarvam_moe", ALL_MODES, since_major=5, **RAGGED_EVERY_MODE),
    moe("sarvam_moe_seed1", "sarvam_moe", overrides={"seed": 1}, fp16_cuda=True, since_major=5),
    # Sarvam-MoE's spec under Param2-MoE's config class (tied, RoPE base 500000): gqa, int4 / int8 (5.25's class)
    moe_family(
        "param2moe",
        since_major=5,
        since=(5, 25),
        gathered_tables=frozenset({"model.word_embeddings.qweight"}),
        ragged_logits_modes=("gqa",),
    ),
    # GraniteMoE's experts without the shared MLP, with GraniteSWA's sinks, sliding layers and RoPE base per
    # layer (one NoPE): gqa only, like granite_swa, whose row checks the rest (5.25's class)
    moe("granitemoe_swa", generate_modes=("gqa",), since_major=5, since=(5, 25), ragged_logits_modes=("gqa",)),
    # GLM-4-MoE's experts with Qwen3.5's output gate in q_proj, no q/k norms, full RoPE (5.25's class)
    moe_family("minicpm5_moe", ALL_MODES, since_major=5, since=(5, 25), **RAGGED_EVERY_MODE),
    # Llama's layers, a bare router weight, transposed [gate | up] SiLU experts, two shared experts (5.25's class);
    # the hub's experts.fc1/fc2 and transformers' own gate_up_proj/down_proj
    moe_family("aria_text", since_major=5, since=(5, 25), **SHORT_GENERATE),
    moe("aria_text_v5", "aria_text", hub_layout=False, since_major=5, since=(5, 25)),
    # HY-V3 (5.25's class): Qwen3's attention, sigmoid experts with a selection bias renormalized x scaling
    # in fp32, shared experts; the hub's names (mlp.router.gate, mlp.expert_bias, mlp.shared_mlp) and transformers'
    moe_family("hy_v3", since_major=5, since=(5, 25), logits_modes=("bias",), **ONE_PROMPT, **RAGGED_LOGITS),
    moe("hy_v3_v5", "hy_v3", hub_layout=False, since_major=5, since=(5, 25)),
    # Kolibri-1 (5.25's class): EXAONE-4's attention (sliding RoPE layers, a NoPE full one) in GLM-4's sandwich norms,
    # experts chosen on logits + the selection bias, sigmoid-weighted, a shared expert; hub names and transformers'
    moe_family("kolibri1", ALL_MODES, since_major=5, since=(5, 25), **ONE_PROMPT, **RAGGED_GQA),
    moe("kolibri1_v5", "kolibri1", hub_layout=False, since_major=5, since=(5, 25)),
    # OLMoE's full-width q/k norms, partial RoPE, sigmoid experts with a selection bias (hub names: block_sparse_moe)
    moe_family("minimax_m2", ALL_MODES, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    moe("minimax_m2_v5", "minimax_m2", hub_layout=False, since_major=5),  # mlp.experts fused, mlp.gate
    # Gemma norms, per-head q/k norms, dense / sparse layers, clamped-SwiGLU experts x2 with a shared expert, a
    # block-sparse layer within its cap (5.25's class; transformers' own names: the hub ships only the VL model)
    moe_family(
        "minimax_m3_vl_text", ALL_MODES, since_major=5, since=(5, 25), hub_layout=False, ragged_logits_modes=("gqa",)
    ),
    # sandwich norms, the gated attention output, NoPE full layers, muP embedding scale, route_scale
    moe_family("afmoe", ALL_MODES, since_major=5, fp16_cuda=True, **RAGGED_EVERY_MODE),
    moe("afmoe_v5", "afmoe", hub_layout=False, since_major=5),
    # sliding layers with twice the kv heads and sinks (hub: attention_sink_bias), values narrower than keys
    # (x0.707), partial RoPE with a theta per layer type, sigmoid grouped experts without shared ones. The
    # sinks need GroupQueryAttention: gqa only (bias and split refused in one line)
    moe_family(
        "mimo_v2_flash", since_major=5, fp16_cuda=True, ragged_logits_modes=("gqa",), ragged_generate_modes=("gqa",)
    ),
    moe("mimo_v2_flash_v5", "mimo_v2_flash", hub_layout=False, since_major=5),  # 5.x's names: self_attn.sinks
    # issue #39, transformers 5.25's new types. Laguna: the attention output times softplus(g_proj) per head,
    # query heads per layer (4, 2, 6, 4), partial RoPE at a theta per layer type, sliding layers, sigmoid
    # experts on softcapped logits with a selection bias beside a shared expert; 5.x's own names with the
    # gate per channel (gating "per-element")
    moe_family("laguna", ALL_MODES, since_major=5, since=(5, 25), new_tokens=20, **RAGGED_EVERY_MODE),
    moe("laguna_v5", "laguna", hub_layout=False, overrides={"gating": "per-element"}, since_major=5, since=(5, 25)),
    # ZAYA1 (transformers 5.25): compressed convolutional attention (a conv state of q|k projections and a
    # delayed-value state beside each layer's KV cache, q/k L2-normed with a key temperature), affine residual
    # maps, the top 1 of 6 experts or a skip class under an MLP router over a stream carried across layers.
    # The states run in the GQA graph only: greedy tokens and a ragged batch in gqa, the other modes refused
    # (mutants: tests/arch/test_zaya.py)
    moe(
        "zaya",
        generate_modes=("gqa",),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        prompt=LONG_PROMPT,
        since_major=5,
        since=(5, 25),
        gathered_tables=frozenset({"model.embed_tokens.qweight"}),
    ),
    # its heads 32 wide: RoPE on 16 channels, rotated by GroupQueryAttention's fused RoPE (ZAYA1-8B's 64 of 128)
    # instead of plain ops before it
    moe(
        "zaya_fused_rope",
        "zaya",
        overrides={"head_dim": 32},
        generate_modes=("gqa",),
        ragged_logits_modes=("gqa",),
        prompt=LONG_PROMPT,
        since_major=5,
        since=(5, 25),
    ),
    # Inkling: a relative position bias per query and head (GroupQueryAttention's attention_bias under its causal mask
    # and window), residual short convolutions on keys / values and both blocks' outputs (four conv states in genai's
    # two per layer beside the KV cache), sliding layers with their own heads, the full layers' queries and bias
    # log-scaled, a sigmoid router weighting the shared experts beside the chosen ones. The states run in the GQA
    # graph only: greedy tokens and a ragged batch in gqa, the other modes refused (mutants: tests/arch/test_inkling.py)
    moe(
        "inkling_text",
        generate_modes=("gqa",),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="fused",
        float_matmuls=True,  # the relative banks [1, d_rel, E]
        fp16_cuda=True,
        prompt=LONG_PROMPT,
        since_major=5,
        since=(5, 25),
    ),
    # Inkling2: Inkling's relative bias and residual convolutions (outputs scaled) with block attention residuals (each
    # layer's inputs attended over stacked block states), L2-clipped heads, a sink logit per token (the bias minus it,
    # a zero head_sink), per-token conv taps on the full layers' keys and values, a gated o_proj, soft-capped SwiGLU
    # experts as plain ops, capped logits of a 380-row head; transformers' layout (the hub's serving layout, model.llm.*
    # with stacked block queries and interleaved experts, gives this package: tests/arch/test_inkling2.py). gqa only
    # (mutants: tests/arch/test_inkling2.py)
    moe(
        "inkling2_text",
        hub_layout=False,
        generate_modes=("gqa",),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="plain",
        prompt=LONG_PROMPT,
        since_major=5,
        since=(5, 25),
    ),
    # Inkling2-Loop: Inkling2 whose layers 2 and 3 run 3 times unrolled (each pass its own KV caches and convolution
    # states, in HF's cache order), the later passes gating the previous pass's messages into their query, key, value
    # and MLP inputs. gqa only (mutants: tests/arch/test_inkling2_loop.py)
    moe(
        "inkling2_loop_text",
        hub_layout=False,
        generate_modes=("gqa",),
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
        quantized=("int4",),
        accuracy_level=0,
        experts="plain",
        prompt=LONG_PROMPT,
        since_major=5,
        since=(5, 25),
    ),
    # Beam-1.0: the NoPE layers' position query scale read from the positions the graph has (decode steps, right
    # padding: a ragged batch in every mode), the gate's per-head bias, depth-scaled adds, grouped sigmoid router
    # (its int4 and int8 smoke runs end at EOS before 16 tokens; no initializer range of 0.05-0.4 keeps both going)
    moe_family(
        "beam",
        ALL_MODES,
        since_major=5,
        since=(5, 25),
        smoke_meets_eos=frozenset({5}),
        fp16_cuda=True,
        **ONE_PROMPT,
        **RAGGED_EVERY_MODE,
    ),
    moe("beam_v5", "beam", hub_layout=False, since_major=5, since=(5, 25)),
    # Ergo: learned per-channel residual gates on every add, an RMSNorm per routed expert before the weighted sum
    # (every expert on every token, plain ops over 3-D weights that int4 / int8 keep float), a shared expert with
    # its own norm, interleaved RoPE on the sliding layers; the hub's serving layout (tok_embeddings,
    # attention.wqkv, a router gate_kernel [H, E]) read through transformers' renames, and transformers' own
    moe_family(
        "ergo",
        ALL_MODES,
        experts="plain",
        float_matmuls=True,
        fp16_cuda=True,
        since_major=5,
        since=(5, 25),
        **ONE_PROMPT,
        **RAGGED_EVERY_MODE,
    ),
    moe("ergo_v5", "ergo", hub_layout=False, since_major=5, since=(5, 25)),
    # the full layers' logits times global_attention_scale (queries and keys each times its square root in HF; the
    # softmax scale of those layers here), in every mode
    moe(
        "ergo_scaled",
        "ergo",
        hub_layout=False,
        overrides={"global_attention_scale": 1.7},
        generate_modes=ALL_MODES,
        ragged_logits_modes=("gqa",),
        since_major=5,
        since=(5, 25),
        **ONE_PROMPT,
    ),
    # Mellum: Qwen3-MoE's layers with windows, RoPE at a theta per layer type and dense layers by mlp_layer_types
    # (mechanisms other rows prove): every mode's greedy tokens, a ragged batch in gqa, int4 / int8
    moe_family("mellum", ALL_MODES, since_major=5, since=(5, 25), new_tokens=20, ragged_logits_modes=("gqa",)),
    # Flint: a sink logit per head (the hub's softmax_offset), RoPE on sliding layers only, sigmoid experts (fp32
    # router, no selection bias) beside an ungated-sum shared expert. The sinks need GroupQueryAttention: gqa
    # only; 5.x's own names (self_attn.sinks, fused experts) on logits. Laguna, Mellum, Flint, Lara-Mini: 20
    # greedy tokens per prompt (the suite's time budget)
    moe_family(
        "flint",
        since_major=5,
        since=(5, 25),
        new_tokens=20,
        ragged_logits_modes=("gqa",),
        ragged_generate_modes=("gqa",),
    ),
    moe("flint_v5", "flint", hub_layout=False, since_major=5, since=(5, 25)),
)
BY_NAME = {family.name: family for family in FAMILIES}
assert len(BY_NAME) == len(FAMILIES), "a family name is registered twice"


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def transformers_minor() -> tuple[int, int]:
    import transformers

    major, minor = transformers.__version__.split(".")[:2]
    return int(major), int(minor)


# what this run checks: every family whose class the installed transformers has (the floor run of
# tests/compat, transformers 4.57, included)
REGISTERED = tuple(
    family for family in FAMILIES if family.since_major <= transformers_major() and family.since <= transformers_minor()
)


def require_registered(name: str) -> None:
    """Skip a family module's check where the installed transformers has no class for the row
    (REGISTERED holds the rows it builds: the floor run's transformers lacks the newer ones)."""
    import transformers

    if BY_NAME[name] not in REGISTERED:
        pytest.skip(f"{name} needs a newer transformers than {transformers.__version__}")


def skip_where_the_reference_differs(family: Family, generation: bool = False, fp16: bool = False) -> None:
    """Skip where the installed transformers 4.x computes the family differently from 5.x itself
    (`generation`: its generate() only; `fp16`: the fp16 package's comparison only)."""
    import transformers

    why = family.generate_differs_under_4x if generation else family.differs_under_4x
    why = why or (family.fp16_differs_under_4x if fp16 else None)
    if why and transformers_major() < 5:
        pytest.skip(f"transformers {transformers.__version__} computes {family.name} differently: {why}")


class FamilyBuilds:
    """Each registered checkpoint, and each (checkpoint, mode, ep, precision, settings) package
    built from it without a smoke run, made once per session however many modules ask."""

    def __init__(self, root: Path, checkpoints: Any) -> None:
        self.root = root
        self.checkpoints = checkpoints  # conftest.py's session checkpoints, shared with other modules
        self._checkpoints: dict[str, Path] = {}
        self._packages: dict[tuple[str, ...], Path] = {}

    @classmethod
    def of_session(cls, request: pytest.FixtureRequest, checkpoints: Any, tmp_path_factory: Any) -> FamilyBuilds:
        """The session's one instance, which conftest.py's `builds` fixture returns to every module."""
        key = _SESSION_BUILDS
        if key not in request.config.stash:
            request.config.stash[key] = cls(tmp_path_factory.mktemp("families"), checkpoints)
        return request.config.stash[key]

    def checkpoint(self, name: str) -> Path:
        if name not in self._checkpoints:
            make = BY_NAME[name].make
            self._checkpoints[name] = make(self.root / name) if make else self.checkpoints.get(name)
        return self._checkpoints[name]

    def package(
        self,
        name: str,
        mode: str = "gqa",
        ep: str = "cpu",
        precision: str = "fp32",
        settings: tuple[str, ...] = (),
        bidirectional_ids: tuple[int, ...] | None = None,
    ) -> Path:
        """`mode`: an attention mode, or one of MODE_SETTINGS (a mode with its settings): keyed by the
        attention mode and all its settings, so a form asked for either way is built once."""
        attention, settings = mode.partition("_")[0], settings + MODE_SETTINGS.get(mode, ())
        key = (name, attention, ep, precision, *settings, *(f"bidir{i}" for i in bidirectional_ids or ()))
        if key not in self._packages:
            from gqa_export.pipeline import BuildOptions, build

            out = self.root / "packages" / "-".join(key)
            build(
                BuildOptions(
                    str(self.checkpoint(name)), out, ep=ep, precision=precision, attention=attention,
                    settings=settings, bidirectional_ids=bidirectional_ids, smoke=False,
                    text_only=True,  # the text decoders (full multimodal packages: test_multimodal_package.py)
                )
            )  # fmt: skip
            self._packages[key] = out
        return self._packages[key]


_SESSION_BUILDS = pytest.StashKey[FamilyBuilds]()
