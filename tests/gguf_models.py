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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf_quants import quantize

# GGUF architecture -> (writer of its metadata keys, whether q/k rows are permuted)
PERMUTED_QK = {"llama"}
NORM_PLUS_ONE = {"gemma2", "gemma3", "nemotron"}  # llama.cpp stores these norms as 1 + w


def _hf_tensors(checkpoint: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(checkpoint.glob("*.safetensors")):
        tensors.update({k: v.astype(np.float32) for k, v in load_file(shard).items()})
    return tensors


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: per head, rows (pairs, half) -> (half, pairs)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


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


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    params = params.get("full_attention", params)
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def _llama_keys(writer: Any, config: dict[str, Any]) -> None:
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(head_dim)
    if config.get("head_dim"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


METADATA: dict[str, Callable[[Any, dict[str, Any]], None]] = {"llama": _llama_keys}


def default_type(name: str, shape: tuple[int, ...], base: str) -> str:
    """llama.cpp's rule of thumb: 1-D tensors F32, 2-D ones the file type where K fits its blocks."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    if len(shape) < 2 or base in ("F32", "F16", "BF16"):
        return "F32" if len(shape) < 2 else base
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
) -> Path:
    """Write `checkpoint` (a tiny HF folder) as a GGUF of architecture `arch` at `out`."""
    import gguf

    config = json.loads((checkpoint / "config.json").read_text())
    layers = config["num_hidden_layers"]
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(arch_id, layers)
    writer = gguf.GGUFWriter(out, arch, split_max_tensors=split_max_tensors)
    writer.add_name(config.get("_name_or_path") or "tiny")
    METADATA[arch](writer, config)
    if tokenizer:
        _tokenizer(writer, checkpoint, config, pre)
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    for hf_name, value in _hf_tensors(checkpoint).items():
        base, _, suffix = hf_name.rpartition(".")
        gguf_base = names.get_name(base)
        if gguf_base is None:
            raise KeyError(f"no GGUF name for {hf_name}")
        name = f"{gguf_base}.{suffix}"
        if any(d in name for d in drop):
            continue
        if arch in PERMUTED_QK and suffix == "weight" and gguf_base.endswith(("attn_q", "attn_k")):
            value = permute(value, heads if gguf_base.endswith("attn_q") else kv_heads)
        if arch in NORM_PLUS_ONE and "norm" in gguf_base and suffix == "weight":
            value = value + np.float32(1.0)
        kind = types(name, value.shape) if callable(types) else default_type(name, value.shape, types)
        _add(writer, name, value, kind)
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
