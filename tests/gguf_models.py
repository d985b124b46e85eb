"""GGUF files written from the tiny HF checkpoints, the way llama.cpp's converter lays them out.

    write_gguf(checkpoint, out_file, types="Q4_K") -> out_file

Metadata keys, tensor names (the `gguf` package's TensorNameMap, which llama.cpp's converter
uses), llama.cpp's q/k row permutation for the Llama architecture, Gemma's stored (1 + w) norms,
the byte-level BPE vocabulary as `tokenizer.ggml.*` and the chat template. `types` picks each
2-D weight's GGML type (a name, or a function of the GGUF tensor name); 1-D tensors stay F32 as
llama.cpp keeps them. The integer blocks come from tests/gguf_quants.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf_quants import quantize

# GGUF architecture -> (writer of its metadata keys, whether q/k rows are permuted)
PERMUTED_QK = {"llama"}
NORM_PLUS_ONE = {"gemma2", "gemma3", "nemotron"}  # llama.cpp stores these norms as 1 + w
NO_LM_HEAD = {"gemma2"}  # llama.cpp's converter skips a stored lm_head (the embedding is tied)


EXPERT = re.compile(r"^(model\.layers\.\d+\.(?:mlp|block_sparse_moe)\.experts)\.(\d+)\.(\w+)\.weight$")
PER_HEAD_NORM = re.compile(r"^(model\.layers\.\d+\.self_attn\.[qk]_layernorm)\.norms\.(\d+)\.weight$")
GROUPED_QKV = {"bloom", "falcon"}  # the converter regroups the fused qkv rows: all q, then k, then v
TRANSPOSED = {"gpt2"}  # the converter transposes Conv1D weights [in, out] to [out, in]


def _hf_tensors(checkpoint: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors in fp32, per-expert Linears stacked [E, N, K] as llama.cpp's
    converter stacks them (`...mlp.experts.gate_proj.weight`)."""
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(checkpoint.glob("*.safetensors")):
        tensors.update({k: v.astype(np.float32) for k, v in load_file(shard).items()})
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name in [n for n in tensors if EXPERT.match(n)]:
        prefix, e, proj = EXPERT.match(name).groups()  # type: ignore[union-attr]
        experts.setdefault(f"{prefix}.{proj}.weight", {})[int(e)] = tensors.pop(name)
    for name, by_index in experts.items():
        tensors[name] = np.stack([by_index[e] for e in sorted(by_index)])
    heads: dict[str, dict[int, np.ndarray]] = {}  # StableLM's per-head q/k LayerNorms, stacked [heads, head_dim]
    for name in [n for n in tensors if PER_HEAD_NORM.match(n)]:
        prefix, h = PER_HEAD_NORM.match(name).groups()  # type: ignore[union-attr]
        heads.setdefault(f"{prefix}.weight", {})[int(h)] = tensors.pop(name)
    for name, by_index in heads.items():
        tensors[name] = np.stack([by_index[h] for h in sorted(by_index)])
    return tensors


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: per head, rows (pairs, half) -> (half, pairs)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def regroup_qkv(w: np.ndarray, heads: int, kv_heads: int) -> np.ndarray:
    """The converter's fused-qkv regrouping (BloomModel / FalconModel.modify_tensors): per kv group
    [r queries, key, value] rows -> every query, then every key, then every value."""
    r = heads // kv_heads
    d = w.shape[0] // (heads + 2 * kv_heads)
    groups = w.reshape(kv_heads, r + 2, d, *w.shape[1:])
    q = groups[:, :r].reshape(heads * d, *w.shape[1:])
    k = groups[:, r].reshape(kv_heads * d, *w.shape[1:])
    v = groups[:, r + 1].reshape(kv_heads * d, *w.shape[1:])
    return np.concatenate([q, k, v])


def _kv_heads(config: dict[str, Any], heads: int) -> int:
    if config.get("model_type") == "falcon":
        return (
            config["num_kv_heads"] if config.get("new_decoder_architecture") else 1 if config["multi_query"] else heads
        )
    return config.get("num_key_value_heads", heads)


def _tokenizer(writer: Any, checkpoint: Path, config: dict[str, Any], pre: str) -> None:
    tok = json.loads((checkpoint / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab.update(special)
    size = config["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [5] * size  # UNUSED until named
    for text, index in vocab.items():
        if index < size:
            tokens[index] = text
            types[index] = (
                3 if text in special and any(t["special"] for t in tok["added_tokens"] if t["content"] == text) else 1
            )
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("pad_token_id", writer.add_pad_token_id)):  # fmt: skip
        if config.get(key) is not None:
            add(int(config[key]))
    writer.add_add_bos_token(True)
    template = checkpoint / "chat_template.jinja"
    tok_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    chat = template.read_text() if template.is_file() else tok_config.get("chat_template")
    if chat:
        writer.add_chat_template(chat)


def _rope_params(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(full-attention rope parameters, sliding-attention ones) in either transformers spelling."""
    params = config.get("rope_parameters") or {}
    if "full_attention" in params:
        return params["full_attention"], params.get("sliding_attention", {})
    full = dict(params) or {"rope_theta": config.get("rope_theta", 10000.0)}
    sliding = {"rope_theta": config["rope_local_base_freq"]} if "rope_local_base_freq" in config else {}
    return full, sliding


def _text_keys(writer: Any, config: dict[str, Any]) -> None:
    """llama.cpp's TextModel.set_gguf_parameters: the keys every decoder gets."""
    heads = config["num_attention_heads"]
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    full, sliding = _rope_params(config)
    if full.get("rope_type") == "llama3":  # stored as the rope_freqs tensor instead (write_gguf)
        pass
    elif full.get("rope_type") == "linear":
        import gguf

        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(full["factor"])
    if full.get("rope_theta") is not None:
        writer.add_rope_freq_base(full["rope_theta"])
    if sliding.get("rope_theta") is not None:
        writer.add_rope_freq_base_swa(sliding["rope_theta"])
    for key in ("rms_norm_eps", "norm_eps"):
        if config.get(key) is not None:
            writer.add_layer_norm_rms_eps(config[key])
            break
    for key in ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"):
        if config.get(key) is not None:
            writer.add_layer_norm_eps(config[key])
            break
    if config.get("head_dim"):
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])


def _head_dim(config: dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def llama3_rope_factors(config: dict[str, Any]) -> np.ndarray | None:
    """llama.cpp's converter's rope_freqs for a llama3-scaled config (LlamaModel.generate_extra_tensors)."""
    import math

    params, _ = _rope_params(config)
    if params.get("rope_type") != "llama3":
        return None
    base, dim = params.get("rope_theta", 10000.0), _head_dim(config)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = (
        params.get("factor", 8.0),
        params.get("low_freq_factor", 1.0),
        params.get("high_freq_factor", 4.0),
    )
    old = params.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _longrope(writer: Any, config: dict[str, Any]) -> None:
    """Phi3MiniModel's LongRoPE: the original context, the attention factor and the factor tensors."""
    import math

    params, _ = _rope_params(config)
    if params.get("rope_type") != "longrope":
        return
    original = params.get("original_max_position_embeddings") or config["original_max_position_embeddings"]
    scale = config["max_position_embeddings"] / original
    writer.add_rope_scaling_orig_ctx_len(original)
    writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
    writer.add_tensor("rope_factors_long.weight", np.array(params["long_factor"], np.float32))
    writer.add_tensor("rope_factors_short.weight", np.array(params["short_factor"], np.float32))


def _llama_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(_head_dim(config))


def _gemma2_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
    writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_sliding_window(config["sliding_window"])


def _gemma3_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    if config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_sliding_window(config["sliding_window"])


def _partial_rope_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    full, _ = _rope_params(config)
    factor = full.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    writer.add_rope_dimension_count(int(factor * _head_dim(config)))
    if config.get("use_parallel_residual") is not None:
        writer.add_parallel_residual(config["use_parallel_residual"])
    if config.get("sliding_window"):
        writer.add_sliding_window(config["sliding_window"])


def _moe_keys(writer: Any, config: dict[str, Any]) -> None:
    _text_keys(writer, config)
    writer.add_expert_count(config.get("num_local_experts", config.get("num_experts")))
    writer.add_expert_used_count(config["num_experts_per_tok"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if config.get("shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])


def _classic_keys(writer: Any, config: dict[str, Any]) -> None:
    """BloomModel / FalconModel / GPT2Model.set_gguf_parameters: feed_forward_length 4 x hidden
    whatever the MLP is (llama.cpp reads the width from the tensors), one LayerNorm epsilon."""
    hidden = config.get("hidden_size") or config.get("n_embd") or config["n_embed"]
    heads = config.get("num_attention_heads") or config["n_head"]
    writer.add_block_count(config.get("num_hidden_layers") or config["n_layer"])
    writer.add_context_length(config.get("n_positions") or config.get("max_position_embeddings") or 2048)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(4 * hidden)
    writer.add_head_count(heads)
    if config.get("model_type") != "gpt2":
        writer.add_head_count_kv(_kv_heads(config, heads))
    writer.add_layer_norm_eps(config["layer_norm_epsilon"])


def _nemotron_keys(writer: Any, config: dict[str, Any]) -> None:
    """NemotronModel.set_gguf_parameters: the LayerNorm epsilon, partial RoPE as rotary dims."""
    _text_keys(writer, {k: v for k, v in config.items() if k != "norm_eps"})
    writer.add_vocab_size(config["vocab_size"])
    writer.add_layer_norm_eps(config["norm_eps"])
    full, _ = _rope_params(config)
    writer.add_rope_dimension_count(int(full.get("partial_rotary_factor", 1.0) * _head_dim(config)))


def _mixtral_keys(writer: Any, config: dict[str, Any]) -> None:
    _llama_keys(writer, config)
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])


def _lfm2_keys(writer: Any, config: dict[str, Any]) -> None:
    """LFM2Model.set_gguf_parameters: kv heads per layer (0 for a conv layer), the conv cache, the
    MLP width after block_auto_adjust_ff_dim."""
    heads = config["num_attention_heads"]
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv([config["num_key_value_heads"] if t != "conv" else 0 for t in config["layer_types"]])
    full, _ = _rope_params(config)
    writer.add_rope_freq_base(full["rope_theta"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_shortconv_l_cache(config["conv_L_cache"])
    writer.add_layer_norm_rms_eps(config["norm_eps"])
    width = config.get("block_ff_dim") or config["intermediate_size"]
    if config["block_auto_adjust_ff_dim"]:
        width = int(2 * width / 3)
        if config.get("block_ffn_dim_multiplier") is not None:
            width = int(config["block_ffn_dim_multiplier"] * width)
        multiple = config["block_multiple_of"]
        width = multiple * ((width + multiple - 1) // multiple)
    writer.add_feed_forward_length(width)


METADATA: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "lfm2": _lfm2_keys,
    "bloom": _classic_keys,
    "falcon": _classic_keys,
    "gpt2": _classic_keys,
    "nemotron": _nemotron_keys,
    "qwen2moe": _moe_keys,
    "qwen3moe": _moe_keys,
    "llama": _llama_keys,
    "qwen2": _text_keys,
    "qwen3": _text_keys,
    "gemma2": _gemma2_keys,
    "gemma3": _gemma3_keys,
    "phi3": _partial_rope_keys,
    "stablelm": _partial_rope_keys,
    "starcoder2": _text_keys,
}


def default_type(name: str, shape: tuple[int, ...], base: str) -> str:
    """llama.cpp's rule of thumb: 1-D tensors F32, 2-D ones the file type where K fits its blocks."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    if len(shape) < 2 or base in ("F32", "F16", "BF16") or ".ffn_gate_inp" in name or "_norm." in name:
        return "F32" if len(shape) < 2 or ".ffn_gate_inp" in name or "_norm." in name else base  # routers, norms
    block = GGML_QUANT_SIZES[GGMLQuantizationType[base]][0]
    return base if shape[-1] % block == 0 else "Q8_0" if shape[-1] % 32 == 0 else "F16"


def write_gguf(
    checkpoint: Path,
    out: Path,
    types: str | Callable[[str, tuple[int, ...]], str] = "F32",
    arch: str = "llama",
    pre: str = "gpt-2",
    split_max_tensors: int = 0,
    drop: tuple[str, ...] = (),
    tokenizer: bool = True,
    twin: Path | None = None,
) -> Path:
    """Write `checkpoint` (a tiny HF folder) as a GGUF of architecture `arch` at `out`. `twin`: also
    save there the HF checkpoint whose weights are the file's, dequantized by the `gguf` package
    (the reference where transformers cannot load the file itself)."""
    import gguf

    config = json.loads((checkpoint / "config.json").read_text())
    layers = config.get("num_hidden_layers") or config["n_layer"]
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, layers)
    writer = gguf.GGUFWriter(out, arch, split_max_tensors=split_max_tensors)
    writer.add_name(config.get("_name_or_path") or "tiny")
    (_mixtral_keys if config.get("model_type") == "mixtral" else METADATA[arch])(writer, config)
    if tokenizer:
        _tokenizer(writer, checkpoint, config, pre)
    heads = config.get("num_attention_heads") or config["n_head"]
    kv_heads = _kv_heads(config, heads)
    factors = llama3_rope_factors(config) if arch == "llama" else None
    if factors is not None:
        writer.add_tensor("rope_freqs.weight", factors)
    if arch == "phi3":
        _longrope(writer, config)
    twin_tensors: dict[str, np.ndarray] = {}
    for hf_name, value in _hf_tensors(checkpoint).items():
        hf_value, flipped = value, False
        base, _, suffix = hf_name.rpartition(".")
        gguf_base = names.get_name(base) or names.get_name(base.removeprefix("transformer."))
        if gguf_base is None:
            raise KeyError(f"no GGUF name for {hf_name}")
        name = f"{gguf_base}.{suffix}"
        if any(d in name for d in drop) or (arch in NO_LM_HEAD and name == "output.weight"):
            continue
        if arch in PERMUTED_QK and suffix == "weight" and gguf_base.endswith(("attn_q", "attn_k")):
            value = permute(value, heads if gguf_base.endswith("attn_q") else kv_heads)
        if arch in GROUPED_QKV and gguf_base.endswith("attn_qkv"):
            value = regroup_qkv(value, heads, kv_heads)
        if (
            arch in TRANSPOSED
            and value.ndim == 2
            and gguf_base.endswith(("attn_qkv", "attn_output", "ffn_up", "ffn_down"))
        ):
            value, flipped = np.ascontiguousarray(value.T), True
        if arch == "lfm2" and gguf_base.endswith("shortconv.conv") and value.ndim == 3:
            value = np.ascontiguousarray(value[:, 0])  # LFM2Model.modify_tensors: squeeze(1)
        if arch in NORM_PLUS_ONE and "norm" in gguf_base and suffix == "weight":
            value = value + np.float32(1.0)
        kind = types(name, value.shape) if callable(types) else default_type(name, value.shape, types)
        _add(writer, name, value, kind)
        if twin is not None:
            offset = np.float32(1.0) if arch in NORM_PLUS_ONE and "norm" in gguf_base and suffix == "weight" else None
            twin_tensors[hf_name] = _round_trip(hf_value, kind, flipped, offset)
    if twin is not None:
        _save_twin(checkpoint, twin, twin_tensors)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add(writer: Any, name: str, value: np.ndarray, kind: str) -> None:
    from gguf.constants import GGMLQuantizationType

    if kind == "F32":
        writer.add_tensor(name, np.ascontiguousarray(value, np.float32))
    elif kind == "F16":
        writer.add_tensor(name, value.astype(np.float16))
    else:
        raw = quantize(value, kind)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=GGMLQuantizationType[kind])


def _round_trip(value: np.ndarray, kind: str, transposed: bool, offset: np.float32 | None) -> np.ndarray:
    """An HF tensor as the file holds it, read back: quantized and dequantized by the `gguf` package
    along the file's rows (a row permutation commutes with it; a transposed weight does not)."""
    if kind == "F32":
        return (value + offset) - offset if offset is not None else value
    if kind == "F16":
        return value.astype(np.float16).astype(np.float32)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    stored = np.ascontiguousarray(value.T) if transposed else value
    back = dequantize(quantize(stored, kind), GGMLQuantizationType[kind]).reshape(stored.shape)
    return np.ascontiguousarray(back.T) if transposed else back


def _save_twin(checkpoint: Path, out: Path, tensors: dict[str, np.ndarray]) -> None:
    """The checkpoint folder again with `tensors` (stacked experts split back per expert)."""
    import shutil

    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    flat: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        stacked = re.match(r"^(.*\.experts)\.(\w+)\.weight$", name)
        if stacked and value.ndim == 3:
            flat.update({f"{stacked.group(1)}.{e}.{stacked.group(2)}.weight": value[e] for e in range(value.shape[0])})
        else:
            flat[name] = value
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in flat.items()}, str(out / "model.safetensors"))
    for item in checkpoint.iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".index.json")):
            shutil.copy(item, out / item.name)
