"""Which class-local config keys the installed transformers' class of a config never reads.

A config.json may carry another family's key: a template's leftover, a merge tool's, a fine-tune
that copied a neighbour's config (a Mixtral with `final_logit_softcapping`, a Qwen-MoE with
`attention_multiplier`). transformers keeps the key as an attribute and its class never looks at
it, while the export reads each option for every family that might have it, so such a key used
to change the package's numbers (0.3 to 3.9 off HF on the tiny models the round-3 probe built).

The keys below are read only by the modeling code of the classes that define them, never by
transformers' shared code for a forward's numbers (unlike `sliding_window` or
`attention_chunk_size`, which its cache reads, or `partial_rotary_factor` and `head_dim`, which
its RoPE initialisation reads; `rms_norm_eps` is also read by the shared multi-token-prediction
layers, which the export does not build, and `num_key_value_heads` by cache sizing only). Where
neither the modeling nor the configuration file of the config's model type names a key as a
whole word (nor a sibling model's file it imports from), the class cannot read it, and the
export ignores it too (docs/coverage.md §37): the values (soft caps, multipliers), the norm eps
and top-k spellings (a StableLM with a stray `rms_norm_eps` was exported at that eps instead of
its `layer_norm_eps`), and the structure switches each spec reads for its own mechanism (a Llama
with a stray `num_kv_shared_layers` shared its KV caches). A config whose class is not
transformers' own (remote code read with a stand-in class) has its stand-in's files checked,
which are the reference it is held to.

`stray_refusals` covers the one shared key that the export cannot simply ignore: a
`sliding_window` the class never names (its forward attends to everything, transformers' cache
crops decoding to it).
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from gqa_export.arch.spec_records import STRAY_WINDOW, Refusal
from gqa_export.model.config_reads import config_get

CLASS_LOCAL_KEYS = (
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "attention_multiplier",
    "embedding_multiplier",
    "residual_multiplier",
    "logits_scaling",
    "logit_scale",
    "clip_qkv",
    "no_rope_layers",
    "norm_topk_prob",
    "routed_scaling_factor",
    "scale_depth",
    "moe_router_logit_softcapping",
    "router_logit_multiplier",
    # the spellings config_keys tries in turn for the norm eps and the experts per token (each class names the one
    # it reads; not num_experts, which transformers' shared MoE and loading code reads)
    "rms_norm_eps",
    "layer_norm_eps",
    "norm_epsilon",
    "norm_eps",
    "num_experts_per_tok",
    "top_k_experts",
    # the structure switches each family spec reads for its own mechanism (round-4 stray-key probe: read for every
    # family, each moved a class that never names it, 0.2 to 17 off HF, or broke its build)
    "num_kv_shared_layers",
    "layer_rope_theta",
    "shared_expert_combination_strategy",
    "mup_enabled",
    "use_qk_norm",
    "mamba_norm_before_gate",
    "rope_interleave",
    "hc_magnitude",
    "kda_safe_gate",
    "attention_k_eq_v",
    "recurrent_kv_cache_mode",
    "scale_attn_by_inverse_layer_idx",
    "scale_attn_weights",
    "value_head_dim",
    "hidden_size_per_layer_input",
    "output_vocab_size",
    "additional_vocab_size",
    "num_attention_heads_per_layer",
    "enable_moe_block",
    "global_head_dim",
    "mamba_hidden_act",
    "expansion_ratio",
    "q_lora_rank",
    "use_double_wide_mlp",
    "kv_source_layers",
    "mamba_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "moe_layers",
    "moe_layer_end_index",
    "expert_layer_period",
    "num_dense_layers",
    "zero_expert_num",
    "residual_gate_temperature",
    "rope_scaling_layers",
    "index_topk",
    # read by transformers' shared code only to size caches, never for a forward's numbers (a class that never names
    # it has no grouped heads: GPT-2, GPT-J, GPT-NeoX, OPT, Bloom, MPT, ...)
    "num_key_value_heads",
)
_SIBLING = re.compile(r"from \.\.(\w+)\.(?:modeling|configuration)_\w+ import")


def class_read(config: Any, name: str) -> Any:
    """config_get for a spec's own switch key: None where the config's class never names it (CLASS_LOCAL_KEYS)."""
    return None if name in unread_keys(config) else config_get(config, name)


def unread_keys(config: Any) -> frozenset[str]:
    """CLASS_LOCAL_KEYS that the config's class and its modeling code never name; empty where the
    class's files cannot be found (nothing is dropped then)."""
    return _never_named(config, CLASS_LOCAL_KEYS)


def stray_refusals(config: Any) -> tuple[Refusal, ...]:
    """STRAY_WINDOW where the config's class never names `sliding_window`: its forward never windows, while
    transformers' cache, built from the config, crops decoding to the window (docs/coverage.md §37). Not skipped
    like CLASS_LOCAL_KEYS: no export equals both."""
    return (STRAY_WINDOW,) if _never_named(config, ("sliding_window",)) else ()


def _never_named(config: Any, keys: tuple[str, ...]) -> frozenset[str]:
    module = sys.modules.get(type(config).__module__)
    path = getattr(module, "__file__", None)
    if not path or not type(config).__module__.startswith("transformers.models."):
        return frozenset()
    return _unread_in(Path(path).parent, keys)


@cache
def _unread_in(package: Path, keys: tuple[str, ...]) -> frozenset[str]:
    text = _source(package)
    if not text:
        return frozenset()
    for sibling in sorted(set(_SIBLING.findall(text))):
        text += _source(package.parent / sibling)
    return frozenset(key for key in keys if not re.search(rf"\b{key}\b", text))  # norm_eps in rms_norm_eps


def _source(package: Path) -> str:
    files = sorted(package.glob("modeling_*.py")) + sorted(package.glob("configuration_*.py"))
    return "".join(f.read_text(encoding="utf-8") for f in files)
