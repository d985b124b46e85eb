"""GGUF tensor names mapped back to the transformers checkpoint names a family's spec reads.

llama.cpp's converter renames every tensor (`model.layers.3.self_attn.q_proj.weight` ->
`blk.3.attn_q.weight`) and, for some architectures, changes it on the way: the Llama architecture
permutes the q and k rows within each head (its rotary embedding pairs adjacent channels where
transformers pairs the two halves of a head), and Gemma / Nemotron store norm weights as 1 + w.
Each is undone here exactly as transformers' GGUF loader undoes it (docs/gguf.md §4): a row
permutation (HF row r is GGUF row perm[r]: moving whole rows, so integer blocks move unchanged)
and a value offset on float vectors. Tables are per GGUF architecture; a tensor a table does not
name is refused in one line, never dropped.
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
TABLES: dict[str, dict[str, str]] = {
    "llama": _LLAMA_LIKE,
    "qwen2moe": {**_LLAMA_LIKE, **_EXPERTS, **_SHARED_EXPERT},
    "qwen3moe": {**_LLAMA_LIKE, **_QK_NORM, **_EXPERTS},
    "qwen2": _LLAMA_LIKE,
    "qwen3": {**_LLAMA_LIKE, **_QK_NORM},
    "gemma2": _GEMMA,
    "gemma3": {**_GEMMA, **_QK_NORM},
    "phi3": _FUSED,
    "stablelm": {
        **_LLAMA_LIKE,
        "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_layernorm",
        "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_layernorm",
    },
    "starcoder2": _PLAIN_MLP,
}
# architectures whose norm weights llama.cpp stores as 1 + w (HF: w, the model computes 1 + w)
NORM_PLUS_ONE = frozenset({"gemma2", "gemma3"})
# tensors llama.cpp's converter derives from the config (read into config.json, not weights), and
# the architectures whose config reading takes them (config.py); elsewhere they are refused
DERIVED = {"rope_freqs.weight": frozenset({"llama"})}
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


def hf_name(arch: str, gguf_name: str) -> str | None:
    """The HF name of a GGUF tensor (suffix kept; `{e}` left in for stacked experts), or None
    when the table has none."""
    base, dot, suffix = gguf_name.rpartition(".")
    if not dot or suffix not in ("weight", "bias"):
        base, suffix = gguf_name, ""
    block = _BLOCK.match(base)
    template = f"blk.{{i}}.{block.group(2)}" if block else base
    hf = TABLES[arch].get(template)
    if hf is None:
        return None
    hf = hf.replace("{i}", block.group(1)) if block else hf
    return f"{hf}.{suffix}" if suffix else hf


def qk_rows(rows: int, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's q/k permutation: HF row r is GGUF row result[r]."""
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).swapaxes(1, 2).reshape(rows)


def map_tensors(arch: str, names: list[str], shapes: dict[str, tuple[int, ...]], config: dict) -> dict[str, Mapped]:
    """HF name -> Mapped for every tensor of the file (module doc)."""
    if arch not in TABLES:
        raise InputError(f"GGUF architecture '{arch}' has no tensor name table in gqa-export")
    out: dict[str, Mapped] = {}
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for name in names:
        if name in DERIVED:
            if arch not in DERIVED[name]:
                raise InputError(f"GGUF tensor '{name}' of architecture '{arch}' is not read by gqa-export's import")
            continue
        hf = hf_name(arch, name)
        if hf is None:
            raise InputError(
                f"GGUF tensor '{name}' has no transformers counterpart gqa-export knows for architecture '{arch}'; "
                "the file holds a variant this import does not read"
            )
        rows = None
        if arch in PERMUTED_QK and (".attn_q." in name or ".attn_k." in name):
            rows = qk_rows(shapes[name][0], heads if ".attn_q." in name else kv_heads)
        offset = 1.0 if arch in NORM_PLUS_ONE and name.endswith("norm.weight") else 0.0
        if "{e}" in hf:  # stacked experts: one HF Linear per expert
            for e in range(shapes[name][0]):
                out[hf.replace("{e}", str(e))] = Mapped(name, hf.replace("{e}", str(e)), rows, offset, e)
            continue
        out[hf] = Mapped(name, hf, rows, offset)
    return out
