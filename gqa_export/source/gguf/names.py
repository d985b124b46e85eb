"""GGUF tensor names mapped back to the transformers checkpoint names a family's spec reads.

llama.cpp's converter renames every tensor (`model.layers.3.self_attn.q_proj.weight` ->
`blk.3.attn_q.weight`) and, for some architectures, changes it on the way: the Llama architecture
permutes the q and k rows within each head (its rotary embedding pairs adjacent channels where
transformers pairs the two halves of a head), Bloom and Falcon regroup their fused qkv rows (all
queries, then keys, then values), GPT-2's Conv1D weights are transposed to [out, in], LFM2's
convolution kernels squeezed to [C, L], StableLM's per-head norms and MoE experts stacked, and
Gemma / Nemotron store norm weights as 1 + w. Each is undone here as transformers' GGUF loader
undoes it (docs/gguf.md §4): a row permutation (HF row r is GGUF row perm[r]: moving whole rows,
so integer blocks move unchanged), a value offset on float vectors, a reshape, one HF tensor per
stacked index, and a transpose (the file's [out, in] is MatMulNBits' own layout, so GPT-2's blocks
are kept; only float reads transpose). Tables are per GGUF architecture; a tensor a table does not
name is refused in one line, never dropped. gpt-oss's split experts, which become one HF tensor
built from two file tensors, are mapped in gpt_oss.py (store.map_file picks the mapping).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gqa_export.errors import InputError

# GGUF name (block index as {i}, no .weight/.bias) -> HF module name
_LLAMA_LIKE = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "blk.{i}.attn_norm": "model.layers.{i}.input_layernorm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj",
    "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj",
    "blk.{i}.attn_output": "model.layers.{i}.self_attn.o_proj",
    "blk.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.ffn_gate": "model.layers.{i}.mlp.gate_proj",
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.up_proj",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.down_proj",
}
_QK_NORM = {
    "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_norm",
    "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_norm",
}
_GEMMA = {
    **_LLAMA_LIKE,
    "blk.{i}.post_attention_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.ffn_norm": "model.layers.{i}.pre_feedforward_layernorm",
    "blk.{i}.post_ffw_norm": "model.layers.{i}.post_feedforward_layernorm",
}
_FUSED = {  # Phi-3: q|k|v and gate|up stored fused, as its checkpoints store them
    **{k: v for k, v in _LLAMA_LIKE.items() if "attn_q" not in k and "attn_k" not in k and "attn_v" not in k},
    "blk.{i}.attn_qkv": "model.layers.{i}.self_attn.qkv_proj",
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.gate_up_proj",
}
_PLAIN_MLP = {  # Starcoder2: c_fc / c_proj
    **{k: v for k, v in _LLAMA_LIKE.items() if "ffn_" not in k or "norm" in k},
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.c_fc",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.c_proj",
}
_EXPERTS = {  # experts stored stacked [E, rows, K]: one HF Linear per expert ({e})
    "blk.{i}.ffn_gate_inp": "model.layers.{i}.mlp.gate",
    "blk.{i}.ffn_gate_exps": "model.layers.{i}.mlp.experts.{e}.gate_proj",
    "blk.{i}.ffn_up_exps": "model.layers.{i}.mlp.experts.{e}.up_proj",
    "blk.{i}.ffn_down_exps": "model.layers.{i}.mlp.experts.{e}.down_proj",
}
_SHARED_EXPERT = {
    "blk.{i}.ffn_gate_shexp": "model.layers.{i}.mlp.shared_expert.gate_proj",
    "blk.{i}.ffn_up_shexp": "model.layers.{i}.mlp.shared_expert.up_proj",
    "blk.{i}.ffn_down_shexp": "model.layers.{i}.mlp.shared_expert.down_proj",
    "blk.{i}.ffn_gate_inp_shexp": "model.layers.{i}.mlp.shared_expert_gate",
}
_CLASSIC = {  # Bloom / Falcon under `transformer.`: fused qkv, plain MLP, LayerNorms with biases
    "token_embd": "transformer.word_embeddings",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",
    "blk.{i}.attn_norm": "transformer.h.{i}.input_layernorm",
    "blk.{i}.attn_qkv": "transformer.h.{i}.self_attention.query_key_value",
    "blk.{i}.attn_output": "transformer.h.{i}.self_attention.dense",
    "blk.{i}.ffn_up": "transformer.h.{i}.mlp.dense_h_to_4h",
    "blk.{i}.ffn_down": "transformer.h.{i}.mlp.dense_4h_to_h",
}
_BLOOM = {
    **_CLASSIC,
    "token_embd_norm": "transformer.word_embeddings_layernorm",
    "blk.{i}.ffn_norm": "transformer.h.{i}.post_attention_layernorm",
}
# Falcon-40B/180B's two norms: llama.cpp's attention reads attn_norm_2 (ln_attn) and its MLP attn_norm
# (ln_mlp); Falcon-7B's one input_layernorm is attn_norm
_FALCON_40B = {
    **_CLASSIC,
    "blk.{i}.attn_norm": "transformer.h.{i}.ln_mlp",
    "blk.{i}.attn_norm_2": "transformer.h.{i}.ln_attn",
}
_GPT2 = {
    "token_embd": "transformer.wte",
    "position_embd": "transformer.wpe",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",
    "blk.{i}.attn_norm": "transformer.h.{i}.ln_1",
    "blk.{i}.attn_qkv": "transformer.h.{i}.attn.c_attn",
    "blk.{i}.attn_output": "transformer.h.{i}.attn.c_proj",
    "blk.{i}.ffn_norm": "transformer.h.{i}.ln_2",
    "blk.{i}.ffn_up": "transformer.h.{i}.mlp.c_fc",
    "blk.{i}.ffn_down": "transformer.h.{i}.mlp.c_proj",
}
_UNGATED_MLP = {k: v for k, v in _LLAMA_LIKE.items() if "ffn_gate" not in k}  # Nemotron: up / down
_SHORT_CONV = {  # LFM2: short-convolution layers beside GQA ones; its final norm is llama.cpp's token_embd_norm
    "token_embd": "model.embed_tokens",
    "token_embd_norm": "model.embedding_norm",
    "output": "lm_head",
    "blk.{i}.attn_norm": "model.layers.{i}.operator_norm",
    "blk.{i}.ffn_norm": "model.layers.{i}.ffn_norm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj",
    "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj",
    "blk.{i}.attn_output": "model.layers.{i}.self_attn.out_proj",
    "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_layernorm",
    "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_layernorm",
    "blk.{i}.shortconv.in_proj": "model.layers.{i}.conv.in_proj",
    "blk.{i}.shortconv.conv": "model.layers.{i}.conv.conv",
    "blk.{i}.shortconv.out_proj": "model.layers.{i}.conv.out_proj",
    "blk.{i}.ffn_gate": "model.layers.{i}.feed_forward.w1",
    "blk.{i}.ffn_down": "model.layers.{i}.feed_forward.w2",
    "blk.{i}.ffn_up": "model.layers.{i}.feed_forward.w3",
}
TABLES: dict[str, dict[str, str]] = {
    "llama": {**_LLAMA_LIKE, **_EXPERTS},  # Mixtral files are `llama` with stacked experts
    "qwen2moe": {**_LLAMA_LIKE, **_EXPERTS, **_SHARED_EXPERT},
    "qwen3moe": {**_LLAMA_LIKE, **_QK_NORM, **_EXPERTS},
    "qwen2": _LLAMA_LIKE,
    "qwen3": {**_LLAMA_LIKE, **_QK_NORM},
    "gemma2": _GEMMA,
    "gemma3": {**_GEMMA, **_QK_NORM},
    "phi3": _FUSED,
    "stablelm": {  # per-head q/k LayerNorms, stacked [heads, head_dim] by the converter: one HF module per head
        **_LLAMA_LIKE,
        "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_layernorm.norms.{e}",
        "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_layernorm.norms.{e}",
    },
    "starcoder2": _PLAIN_MLP,
    "bloom": _BLOOM,
    "falcon": _CLASSIC,
    "gpt2": _GPT2,
    "nemotron": _UNGATED_MLP,
    "lfm2": _SHORT_CONV,
}
# architectures whose norm weights llama.cpp stores as 1 + w (HF: w, the model computes 1 + w)
NORM_PLUS_ONE = frozenset({"gemma2", "gemma3", "nemotron"})
# GPT-2's Conv1D weights, stored [in, out] by HF: llama.cpp's converter transposes them to [out, in]
TRANSPOSED = {"gpt2": ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")}
# depthwise convolution kernels the converter squeezes: HF [C, 1, L], the file [C, L]
SQUEEZED = {"lfm2": ".shortconv.conv.weight"}
# architectures whose fused qkv rows the converter regroups: all queries, then keys, then values
GROUPED_QKV = frozenset({"bloom", "falcon"})
# tensors llama.cpp's converter derives from the config (read into config.json, not weights), and
# the architectures whose config reading takes them (config.py); elsewhere they are refused
DERIVED = {
    "rope_freqs.weight": frozenset({"llama"}),
    "rope_factors_long.weight": frozenset({"phi3"}),
    "rope_factors_short.weight": frozenset({"phi3"}),
}
# architectures whose q/k rows llama.cpp permutes (its LlamaModel.permute)
PERMUTED_QK = frozenset({"llama"})
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Mapped:
    """One GGUF tensor as the HF tensor it was converted from."""

    gguf: str
    hf: str
    rows: np.ndarray | None = None  # HF row r is GGUF row rows[r] (None: same order)
    offset: float = 0.0  # HF value = GGUF value - offset (stored 1 + w norms)
    expert: int | None = None  # one expert of a stacked [E, rows, K] tensor
    transposed: bool = False  # HF holds the file's [out, in] matrix as [in, out] (GPT-2's Conv1D)
    shape: tuple[int, ...] | None = None  # HF's shape of the same values in the same order (LFM2's [C, 1, L])
    interleaved: str | None = None  # gpt-oss: the up tensor whose rows alternate with this gate tensor's (gpt_oss.py)


def table(arch: str, names: list[str]) -> dict[str, str]:
    """The architecture's table; a Falcon file with a second norm per layer is Falcon-40B's layout."""
    if arch == "falcon" and any(n.endswith(".attn_norm_2.weight") for n in names):
        return _FALCON_40B
    return TABLES[arch]


def hf_name(arch: str, gguf_name: str, names: dict[str, str] | None = None) -> str | None:
    """The HF name of a GGUF tensor (suffix kept; `{e}` left in for stacked experts), or None
    when the table (`names`, else the architecture's) has none."""
    base, dot, suffix = gguf_name.rpartition(".")
    if not dot or suffix not in ("weight", "bias"):
        base, suffix = gguf_name, ""
    block = _BLOCK.match(base)
    template = f"blk.{{i}}.{block.group(2)}" if block else base
    hf = (TABLES[arch] if names is None else names).get(template)
    if hf is None:
        return None
    hf = hf.replace("{i}", block.group(1)) if block else hf
    return f"{hf}.{suffix}" if suffix else hf


def qk_rows(rows: int, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's q/k permutation: HF row r is GGUF row result[r]."""
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).swapaxes(1, 2).reshape(rows)


def grouped_qkv_rows(heads: int, kv_heads: int, head_dim: int) -> np.ndarray:
    """The inverse of the converter's fused-qkv regrouping (Bloom, Falcon): HF stores, per kv head
    g, its heads / kv_heads query heads, then its key, then its value; llama.cpp's file holds every
    query head, then every key, then every value. HF row r is GGUF row result[r]."""
    r = heads // kv_heads
    out = []
    for g in range(kv_heads):
        out += [np.arange((g * r + j) * head_dim, (g * r + j + 1) * head_dim) for j in range(r)]
        out.append(np.arange((heads + g) * head_dim, (heads + g + 1) * head_dim))
        out.append(np.arange((heads + kv_heads + g) * head_dim, (heads + kv_heads + g + 1) * head_dim))
    return np.concatenate(out)


def head_counts(config: dict) -> tuple[int, int, int]:
    """(heads, kv heads, hidden size) of a config in any family's spelling (Bloom's n_head, GPT-2's
    n_embd, Falcon's multi_query / num_kv_heads)."""
    heads = int(config.get("num_attention_heads") or config["n_head"])
    hidden = int(config.get("hidden_size") or config.get("n_embed") or config["n_embd"])
    if config.get("model_type") == "falcon":
        new = config.get("new_decoder_architecture")
        kv = config.get("num_kv_heads") if new else (1 if config.get("multi_query", True) else heads)
        return heads, int(kv or heads), hidden
    return heads, int(config.get("num_key_value_heads") or heads), hidden


def _row_transform(arch: str, name: str, shape: tuple[int, ...], config: dict) -> np.ndarray | None:
    """HF row r is GGUF row result[r] for the tensors llama.cpp's converter reorders (module doc)."""
    if arch in PERMUTED_QK and (".attn_q." in name or ".attn_k." in name):
        heads, kv_heads, _ = head_counts(config)
        return qk_rows(shape[0], heads if ".attn_q." in name else kv_heads)
    if arch in GROUPED_QKV and ".attn_qkv." in name:
        heads, kv_heads, hidden = head_counts(config)
        rows = grouped_qkv_rows(heads, kv_heads, hidden // heads)
        if rows.size != shape[0]:
            raise InputError(
                f"GGUF tensor '{name}' has {shape[0]} rows where {heads} heads and {kv_heads} kv heads of width "
                f"{hidden // heads} make {rows.size}"
            )
        return None if (rows == np.arange(rows.size)).all() else rows
    return None


def map_tensors(arch: str, names: list[str], shapes: dict[str, tuple[int, ...]], config: dict) -> dict[str, Mapped]:
    """HF name -> Mapped for every tensor of the file (module doc)."""
    if arch not in TABLES:
        raise InputError(f"GGUF architecture '{arch}' has no tensor name table in gqa-export")
    out: dict[str, Mapped] = {}
    chosen = table(arch, names)
    for name in names:
        if name in DERIVED:
            if arch not in DERIVED[name]:
                raise InputError(f"GGUF tensor '{name}' of architecture '{arch}' is not read by gqa-export's import")
            continue
        hf = hf_name(arch, name, chosen)
        if hf is None:
            raise InputError(
                f"GGUF tensor '{name}' has no transformers counterpart gqa-export knows for architecture '{arch}'; "
                "the file holds a variant this import does not read"
            )
        rows = _row_transform(arch, name, shapes[name], config)
        offset = 1.0 if arch in NORM_PLUS_ONE and name.endswith("norm.weight") else 0.0
        if "{e}" in hf:  # stacked experts (or StableLM's per-head norms): one HF module per index
            for e in range(shapes[name][0]):
                out[hf.replace("{e}", str(e))] = Mapped(name, hf.replace("{e}", str(e)), rows, offset, e)
            continue
        transposed = name.endswith(TRANSPOSED.get(arch, ())) and len(shapes[name]) == 2
        squeezed = arch in SQUEEZED and name.endswith(SQUEEZED[arch]) and len(shapes[name]) == 2
        shape = (shapes[name][0], 1, shapes[name][1]) if squeezed else None
        out[hf] = Mapped(name, hf, rows, offset, transposed=transposed, shape=shape)
    return out
