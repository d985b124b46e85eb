"""A GGUF file's metadata read as the transformers config.json and generation_config.json it means.

llama.cpp's reading of the metadata decides, not transformers' GGUF mapping (which has gaps:
docs/gguf.md §2): the defaults are llama.cpp's (rope.freq_base 10000, key_length hidden/heads,
head_count_kv = head_count), the keys it reads are read (Qwen3-MoE's expert_feed_forward_length,
which transformers 5.24 ignores), tie_word_embeddings is whether `output.weight` is stored, biases
are whether the tensors exist. One function per GGUF architecture fills the family's own keys on
top of the keys every decoder has; an architecture without one is refused in one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.gguf.classic_config import bloom, falcon, gpt2, lfm2, nemotron
from gqa_export.source.gguf.container import GgufFile
from gqa_export.source.gguf.decoder_keys import decoder as _decoder
from gqa_export.source.gguf.decoder_keys import has as _has
from gqa_export.source.gguf.decoder_keys import layer_norm as _layer_norm
from gqa_export.source.gguf.decoder_keys import one as _one
from gqa_export.source.gguf.decoder_keys import rows as _rows

# llama.cpp's end-of-generation tokens found by their text (llama-vocab.cpp), besides eos/eot/eom ids
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
})  # fmt: skip
# general.sampling.* -> generation_config keys (llama.cpp's defaults for the model)
SAMPLING = {"temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p"}


@dataclass(frozen=True)
class Family:
    """How one GGUF architecture becomes a transformers config."""

    model_type: str
    architecture: str
    fill: Callable[[GgufFile, dict[str, Any]], None]


def _llama(f: GgufFile, config: dict[str, Any]) -> None:
    """Llama (and Mistral files); stacked experts make it Mixtral (llama.cpp's `llama` with
    ffn_*_exps: softmax over the experts, top-k renormalized)."""
    _decoder(f, config)
    if _has(f, ".ffn_gate_exps.weight"):
        config.update(model_type="mixtral", architectures=["MixtralForCausalLM"], sliding_window=None)
        config.update(
            num_local_experts=int(f.key("expert_count")), num_experts_per_tok=int(_one(f, "expert_used_count"))
        )
        config["intermediate_size"] = _rows(f, ".ffn_gate_exps.weight", axis=1)
    factors = f.tensors.get("rope_freqs.weight")
    if factors is not None:  # Llama-3.1/3.2: the scaling stored as per-frequency factors
        from gqa_export.source.gguf.rope_factors import llama3_scaling

        original = f.key("rope.scaling.original_context_length")
        values = np.asarray(factors.data, dtype=np.float32)
        config["rope_scaling"] = llama3_scaling(values, config["rope_theta"], config["head_dim"], original, f.path.name)
    config["attention_bias"] = _has(f, ".attn_q.bias")
    config["mlp_bias"] = _has(f, ".ffn_up.bias")


def _qwen2(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    config.setdefault("rms_norm_eps", 1e-6)
    config["use_sliding_window"] = False


def _qwen3(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    config["attention_bias"] = _has(f, ".attn_q.bias")


def _sliding(f: GgufFile, config: dict[str, Any], every: int, default_window: int | None) -> None:
    """Gemma's local/global layers as llama.cpp lays them out (load_swa_pattern): every `every`-th
    layer global, the others sliding, when a window is set."""
    window = f.key("attention.sliding_window", default_window)
    layers = config["num_hidden_layers"]
    if not window:
        config["layer_types"] = ["full_attention"] * layers
        config["sliding_window"] = None
        return
    config["sliding_window"] = int(window)
    config["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


def _gemma_scalar(config: dict[str, Any], big_layers: int) -> None:
    """llama.cpp scales queries by 1/sqrt(head_dim), except for the 27B shape (hidden / heads)."""
    heads = config["num_attention_heads"]
    big = config["num_hidden_layers"] == big_layers
    config["query_pre_attn_scalar"] = config["hidden_size"] // heads if big else config["head_dim"]


def _gemma2(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    config["attn_logit_softcapping"] = float(f.key("attn_logit_softcapping", 50.0)) or None
    config["final_logit_softcapping"] = float(f.key("final_logit_softcapping", 30.0)) or None
    _sliding(f, config, 2, 4096)
    _gemma_scalar(config, 46)
    config["hidden_activation"] = "gelu_pytorch_tanh"


def _gemma3(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    softcap = f.key("final_logit_softcapping")
    config["final_logit_softcapping"] = float(softcap) if softcap else None
    _sliding(f, config, 6, None)
    config["sliding_window_pattern"] = 6
    config["rope_local_base_freq"] = float(f.key("rope.freq_base_swa", 10000.0))
    _gemma_scalar(config, 62)
    config["hidden_activation"] = "gelu_pytorch_tanh"
    config.setdefault("rms_norm_eps", 1e-6)


def _phi3(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    window = f.key("attention.sliding_window")
    config["sliding_window"] = int(window) if window else None
    if "rope_factors_long.weight" in f.tensors:
        config["rope_scaling"] = _longrope(f, config)
        config["original_max_position_embeddings"] = config["rope_scaling"]["original_max_position_embeddings"]


def _longrope(f: GgufFile, config: dict[str, Any]) -> dict[str, Any]:
    """Phi-3's LongRoPE as llama.cpp's converter stores it: the long and short per-frequency factors
    as the rope_factors_long / rope_factors_short tensors, the original context as
    rope.scaling.original_context_length, and the attention factor (the longrope formula of the
    context ratio) as rope.scaling.attn_factor, kept where it differs from that formula."""
    short = f.tensors.get("rope_factors_short.weight")
    original = f.key("rope.scaling.original_context_length")
    if short is None or original is None:
        raise InputError(
            f"{f.path.name}: rope_factors_long without rope_factors_short or rope.scaling.original_context_length "
            "is not a Phi-3 LongRoPE file llama.cpp's converter writes"
        )
    long = np.asarray(f.tensors["rope_factors_long.weight"].data, np.float32)
    scaling: dict[str, Any] = {
        "rope_type": "longrope",
        "long_factor": [float(v) for v in long],
        "short_factor": [float(v) for v in np.asarray(short.data, np.float32)],
        "original_max_position_embeddings": int(original),
    }
    scale = config["max_position_embeddings"] / int(original)
    formula = math.sqrt(1 + math.log(scale) / math.log(int(original))) if scale > 1 else 1.0
    stored = f.key("rope.scaling.attn_factor")
    if stored is not None and abs(float(stored) - formula) > 1e-6 * formula:
        scaling["attention_factor"] = float(stored)
    return scaling


def _stablelm(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    _layer_norm(f, config, "layer_norm_eps")
    config["use_qkv_bias"] = _has(f, ".attn_q.bias")
    config["qk_layernorm"] = _has(f, ".attn_q_norm.weight")
    config["use_parallel_residual"] = bool(f.key("use_parallel_residual", False))


def _starcoder2(f: GgufFile, config: dict[str, Any]) -> None:
    _decoder(f, config)
    _layer_norm(f, config, "norm_epsilon")
    config["use_bias"] = _has(f, ".attn_q.bias")
    config["sliding_window"] = None  # llama.cpp runs Starcoder2 without one


def _experts(f: GgufFile, config: dict[str, Any], normalize: bool) -> None:
    """Stacked experts: the count, how many a token uses, their width (expert_feed_forward_length,
    which llama.cpp reads and transformers 5.24's GGUF mapping ignores), and llama.cpp's top-k
    normalization for the architecture (fixed in its graph code, not in the metadata)."""
    gate = next((t for n, t in f.tensors.items() if n.endswith(".ffn_gate_exps.weight")), None)
    width = f.key("expert_feed_forward_length") or (gate.shape[1] if gate is not None else None)
    if width is None:
        raise InputError(f"{f.path.name}: no expert_feed_forward_length and no ffn_gate_exps tensor to read it from")
    config.update(
        num_experts=int(f.key("expert_count")),
        num_experts_per_tok=int(_one(f, "expert_used_count")),
        moe_intermediate_size=int(_one(f, "expert_feed_forward_length", width)),
        norm_topk_prob=normalize,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )


def _qwen2moe(f: GgufFile, config: dict[str, Any]) -> None:
    _qwen2(f, config)
    _experts(f, config, normalize=False)
    shared = f.key("expert_shared_feed_forward_length")
    if shared is not None:
        config["shared_expert_intermediate_size"] = int(shared)


def _qwen3moe(f: GgufFile, config: dict[str, Any]) -> None:
    _qwen3(f, config)
    _experts(f, config, normalize=True)


def _gpt_oss(f: GgufFile, config: dict[str, Any]) -> None:
    """gpt-oss as llama.cpp's openai-moe reads it: the expert count, used count and width, the
    sliding window (a required key) on every other layer from the first (load_swa_pattern's default
    2, else the file's pattern), the clamped SwiGLU's constants (fixed in llama.cpp's graph: alpha
    1.702, limit 7), top-k softmax routing (the spec's own), and YaRN as ggml computes it: the
    correction range floored and ceiled (transformers' `truncate`; gpt-oss's config says false,
    llama.cpp truncates whatever it says) and an attention factor of 0.1 ln(factor) + 1 times the
    file's rope.scaling.attn_factor (docs/gguf.md §2)."""
    _decoder(f, config)
    if "partial_rotary_factor" in config:
        raise InputError(f"{f.path.name}: a gpt-oss rope.dimension_count other than key_length is not imported")
    width = f.key("expert_feed_forward_length") or _rows(f, ".ffn_gate_exps.weight", axis=1)
    layers = config["num_hidden_layers"]
    window = int(f.key("attention.sliding_window"))
    pattern = f.key("attention.sliding_window_pattern", 2)
    if isinstance(pattern, list):
        swa = [bool(v) for v in pattern]
    else:
        n = int(pattern)
        swa = [n == 0 or i % n < n - 1 for i in range(layers)]
    if len(swa) != layers:
        raise InputError(f"{f.path.name}: sliding_window_pattern has {len(swa)} entries for {layers} layers")
    config.update(
        num_local_experts=int(f.key("expert_count")),
        num_experts_per_tok=int(_one(f, "expert_used_count")),
        intermediate_size=int(_one(f, "expert_feed_forward_length", width)),
        sliding_window=window or None,
        layer_types=["sliding_attention" if s and window else "full_attention" for s in swa],
        attention_bias=_has(f, ".attn_q.bias"),
        swiglu_alpha=1.702,
        swiglu_limit=7.0,
    )
    theta = config.pop("rope_theta")
    scaling = config.pop("rope_scaling", None)
    params: dict[str, Any] = {"rope_type": "default"} if scaling is None else dict(scaling)
    params["rope_theta"] = theta
    if params["rope_type"] == "yarn":
        params["truncate"] = True
        params.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
        mscale = 0.1 * math.log(params["factor"]) + 1.0 if params["factor"] > 1 else 1.0
        params["attention_factor"] = mscale * params.get("attention_factor", 1.0)
    config["rope_parameters"] = params


FAMILIES: dict[str, Family] = {
    "llama": Family("llama", "LlamaForCausalLM", _llama),
    "qwen2moe": Family("qwen2_moe", "Qwen2MoeForCausalLM", _qwen2moe),
    "qwen3moe": Family("qwen3_moe", "Qwen3MoeForCausalLM", _qwen3moe),
    "qwen2": Family("qwen2", "Qwen2ForCausalLM", _qwen2),
    "qwen3": Family("qwen3", "Qwen3ForCausalLM", _qwen3),
    "gemma2": Family("gemma2", "Gemma2ForCausalLM", _gemma2),
    "gemma3": Family("gemma3_text", "Gemma3ForCausalLM", _gemma3),
    "phi3": Family("phi3", "Phi3ForCausalLM", _phi3),
    "stablelm": Family("stablelm", "StableLmForCausalLM", _stablelm),
    "starcoder2": Family("starcoder2", "Starcoder2ForCausalLM", _starcoder2),
    "bloom": Family("bloom", "BloomForCausalLM", bloom),
    "falcon": Family("falcon", "FalconForCausalLM", falcon),
    "gpt2": Family("gpt2", "GPT2LMHeadModel", gpt2),
    "nemotron": Family("nemotron", "NemotronForCausalLM", nemotron),
    "lfm2": Family("lfm2", "Lfm2ForCausalLM", lfm2),
    "gpt-oss": Family("gpt_oss", "GptOssForCausalLM", _gpt_oss),
}


def family_of(f: GgufFile) -> Family:
    family = FAMILIES.get(f.architecture)
    if family is None:
        raise InputError(
            f"{f.path.name} is a GGUF of architecture '{f.architecture}', which gqa-export does not import "
            f"(imported: {', '.join(sorted(FAMILIES))}); export the model's safetensors checkpoint instead"
        )
    return family


def read_config(f: GgufFile) -> dict[str, Any]:
    """The config.json a transformers checkpoint of this model would have (module doc)."""
    family = family_of(f)
    config: dict[str, Any] = {"architectures": [family.architecture], "model_type": family.model_type}
    try:
        family.fill(f, config)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        # the family's keys read as llama.cpp reads them (int(), a division by the head count): a
        # key missing, of another GGUF type (a string layer count) or 0 is a malformed file
        raise InputError(
            f"{f.path.name}: its {f.architecture} metadata is missing a key or holds one of the wrong type or "
            f"value ({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); it is not a model file gqa-export reads"
        ) from None
    vocab = f.tensors.get("token_embd.weight")
    if vocab is None:
        raise InputError(f"{f.path.name} has no token_embd.weight tensor; it is not a complete model file")
    config["vocab_size"] = int(vocab.shape[0])
    config["tie_word_embeddings"] = "output.weight" not in f.tensors
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("padding_token_id", "pad_token_id")):  # fmt: skip
        value = f.metadata.get(f"tokenizer.ggml.{key}")
        if value is not None:
            config[name] = int(value)
    config["torch_dtype"] = "float32"
    return config


def end_of_generation(f: GgufFile) -> list[int]:
    """The ids llama.cpp stops at: eos, eot, eom, and tokens it recognizes by their text."""
    ids = [f.metadata.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    tokens = f.metadata.get("tokenizer.ggml.tokens") or []
    ids += [i for i, text in enumerate(tokens) if text in EOG_TEXTS]
    out: list[int] = []
    for i in ids:
        if i is not None and int(i) not in out:
            out.append(int(i))
    return out


def read_generation_config(f: GgufFile) -> dict[str, Any]:
    """generation_config.json: bos, the end-of-generation ids, pad, and the file's sampling defaults."""
    generation: dict[str, Any] = {}
    bos = f.metadata.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        generation["bos_token_id"] = int(bos)
    eog = end_of_generation(f)
    if eog:
        generation["eos_token_id"] = eog if len(eog) > 1 else eog[0]
    pad = f.metadata.get("tokenizer.ggml.padding_token_id")
    if pad is not None:
        generation["pad_token_id"] = int(pad)
    for key, name in SAMPLING.items():
        value = f.metadata.get(f"general.sampling.{key}")
        if value is not None:
            generation[name] = value
    if float(generation.get("temperature", 0)) > 0:
        generation["do_sample"] = True
    return generation
