"""Reading values out of a transformers config: attributes that may be absent, nested or per layer,
and token ids in every spelling configs use. Apart from model/dims.py, which reads the shapes."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.metadata import version
from typing import Any

from gqa_export.errors import InputError


def config_get(config: Any, name: str) -> Any:
    """A config attribute, or None when absent. Heterogeneous (per-layer) attributes of a
    transformers >= 5.2x config raise on global access; those are read per layer instead."""
    try:
        for part in name.split("."):  # "attn_config.clip_qkv": a nested config's (MPT)
            config = config.get(part) if isinstance(config, dict) else getattr(config, part, None)
        return config
    except RuntimeError:  # AmbiguousGlobalPerLayerAttributeError
        return None


def layer_config(config: Any, i: int) -> Any:
    """Layer i's view of the config: per-layer overrides applied where the config has them
    (Gemma-4's head_dim / num_key_value_heads of full-attention layers)."""
    if config_get(config, "is_heterogeneous"):
        return config.per_layer_config[i]
    return config


def placeholder_ids(outer: Any | None, keys: tuple[str, ...]) -> tuple[int, ...]:
    """The multimodal placeholder ids (image/video/audio) a multimodal class embeds as
    pad_token_id when no pixels replace them (Gemma-4's conditional classes); none for a text model."""
    if outer is None:
        return ()
    return tuple(int(v) for v in (config_get(outer, key) for key in keys) if v is not None)


def masked_logit_ids(config: Any, masked: tuple[str, str] | None, vocab_size: int) -> tuple[int, ...]:
    """The ids whose logits the class sets to the lowest value (ArchSpec.masked_logits): those of the names
    in the config's name -> id map that start with the prefix (Chameleon's "IMGIMG" image tokens), sorted."""
    if masked is None:
        return ()
    key, prefix = masked
    names = config_get(config, key) or {}
    ids = sorted(int(i) for name, i in names.items() if str(name).startswith(prefix))
    if ids and not 0 <= ids[0] <= ids[-1] < vocab_size:
        raise InputError(f"{key} names {prefix}* ids outside the vocabulary of {vocab_size}: fix config.json")
    return tuple(ids)


def token_ids(value: Any) -> list[int]:
    """Token ids as configs spell them: absent, one int, or a list."""
    if value is None:
        return []
    try:
        return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    except (TypeError, ValueError, OverflowError):  # a dict, null in a list, NaN: a hand-edited config
        raise InputError(
            f"a token id in config.json or generation_config.json is {json.dumps(value)[:60]}, not an integer; fix it"
        ) from None


def first_id(value: Any) -> int | None:
    ids = token_ids(value)
    return ids[0] if ids else None


@cache
def transformers_version() -> tuple[int, int]:
    """The installed transformers' (major, minor). Where a release changes what a family computes
    from the same config and weights (Nemotron-H's dt clamp in 5.25), the export follows the
    installed transformers, the one its config was read with (docs/hybrid-state.md §8.6)."""
    found = re.match(r"(\d+)\.(\d+)", version("transformers"))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def pruned_head_rows(opt: Any, vocab_size: int, tied: bool) -> int:
    """The lm_head's rows where the config prunes it to the vocabulary's first `output_vocab_size` ids
    (Apertus-1.5: the multimodal code ids are input-only), else 0; a pruned head tied to the full
    embedding table is refused, as its class cannot be one either."""
    rows = opt("output_vocab_size")
    if rows is None or int(rows) == vocab_size:
        return 0
    if not 1 <= int(rows) <= vocab_size:
        raise InputError(f"output_vocab_size {rows} must be between 1 and vocab_size {vocab_size}")
    if tied:
        raise InputError(
            f"a pruned lm_head (output_vocab_size {rows} of {vocab_size}) tied to the embeddings is not supported"
        )
    return int(rows)


def extra_vocab_rows(opt: Any) -> int:
    """Embedding rows past vocab_size, ids a prompt may hold but the lm_head (vocab_size rows) never scores
    (Molmo2's additional_vocab_size: its image and frame markers); 0 without."""
    rows = int(opt("extra_vocab_rows", 0) or 0)
    if rows < 0:
        raise InputError(f"additional_vocab_size must be >= 0, not {rows}")
    return rows


def layer_heads(opt: Any, i: int, heads: int) -> int:
    """Layer i's own query heads where the config lists them per layer and they differ from the
    model's (Laguna's num_attention_heads_per_layer; the kv heads stay one count), else 0."""
    per_layer = opt("per_layer_heads")
    if not per_layer or not heads:
        return 0
    if len(per_layer) <= i:
        raise InputError(f"num_attention_heads_per_layer has {len(per_layer)} entries, fewer than the layers")
    own = int(per_layer[i])
    return 0 if own == heads else own


def view_heads(config: Any, i: int, heads: int) -> int:
    """Layer i's own query heads where a heterogeneous config overrides num_attention_heads for it (Step3p7's
    sliding layers: its per_layer_config, whose global value then raises on access), else 0."""
    if not heads or not config_get(config, "is_heterogeneous"):
        return 0
    own = config_get(layer_config(config, i), "num_attention_heads")
    return 0 if own is None or int(own) == heads else int(own)
