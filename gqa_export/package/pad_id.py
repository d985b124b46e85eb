"""The package's `pad_token_id`: an id no prompt holds, for every EP (docs/ortgenai.md §5.4).

onnxruntime-genai reads meaning into the pad id of genai_config.json, not only into padding it
adds itself: a prompt's trailing pad ids are taken for right padding, so with full prompt logits
it samples the first token from the logits of the last non-pad position (a prompt `[150, eos]`
with pad = eos gets the first token of `[150]`); a batch row's trailing pad ids are masked; a
windowed (QNN) package ends a prompt at its first pad id; Qwen2-VL's positions skip pad ids. So
the pad id must be one prompts do not end with (for a windowed package: do not hold). In order:

1. the first embedding row past every tokenizer id (tokenizer.json's vocabulary and added tokens)
   when `vocab_size` is larger and that row is finite: no tokenizer ever emits it, so no prompt
   holds it (it only ever fills padding, which the mask hides);
2. the checkpoint's own pad id (config / generation_config), when it is no eos/bos id;
3. the tokenizer's declared pad token (tokenizer_config.json / special_tokens_map.json);
4. an added special token named as a pad (`<|finetune_right_pad_id|>`), used by no chat template;
5. the unknown token of a byte-fallback tokenizer (text never encodes to it);
6. else the first eos id (the previous rule for every package), said in a build note, and `inspect`
   warns: a prompt ending with it gets another first token through the runtime's own API (`run`
   feeds such a tail one token at a time and stays exact: runtime/run.py).

Choices 2-5 are ids a prompt can hold only by spelling a special token, and then only a prompt
ending with it differs. The checkpoint's own pad token (2, 3) is what padding is for and needs no
word; a pad id chosen by 4-6, or any but a spare row in a windowed package, is said in a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gqa_export.jsonio import read_json
from gqa_export.model.dims import ModelDims

UNUSED_ROW = "unused-row"  # no tokenizer id: exact for every prompt
FALLBACK = "eos-fallback"  # the first eos id: prompts ending with it differ


@dataclass(frozen=True)
class PadChoice:
    """The chosen pad id, which rule chose it (the manifest records both), and the build note."""

    id: int
    rule: str  # unused-row | model-pad | tokenizer-pad | pad-token | unk-token | eos-fallback
    note: str | None = None

    def manifest(self) -> dict[str, Any]:
        return {"pad_token_id": self.id, "rule": self.rule}


def choose_pad_id(
    dims: ModelDims, model_dir: Path, row_is_finite: Callable[[int], bool], windowed: bool = False
) -> PadChoice:
    """The package's pad id by the rules above; `row_is_finite(i)`: embedding row i holds no inf/NaN
    (an untrained row may; padding rows are masked, but 0 x NaN is NaN in a matmul). `windowed`:
    a static-shape package, whose runtime cuts a prompt at its first pad id (the notes say so)."""
    tokenizer = _Tokenizer(model_dir)
    special = {*dims.eos_token_ids, dims.bos_token_id} - {None}
    length = tokenizer.length()
    if length is not None and length < dims.vocab_size and row_is_finite(length):
        return PadChoice(length, UNUSED_ROW)
    candidates = (
        ("model-pad", dims.pad_token_id),
        ("tokenizer-pad", tokenizer.declared("pad_token")),
        ("pad-token", tokenizer.spare_pad_token(special)),
        ("unk-token", tokenizer.unencodable_unk()),
    )
    for rule, pad in candidates:
        if pad is None or pad in special or not 0 <= pad < dims.vocab_size:
            continue
        own = rule in ("model-pad", "tokenizer-pad")  # the checkpoint's pad token: padding is its use
        if own and not windowed:
            return PadChoice(pad, rule)
        chosen = "" if own else f", a {rule.replace('-', ' ')} (the checkpoint names no pad id)"
        return PadChoice(pad, rule, _held_note(f"pad_token_id {pad}{_named(tokenizer.content(pad))}{chosen}", windowed))
    fallback = dims.eos_token_ids[0] if dims.eos_token_ids else (dims.pad_token_id or 0)
    what = f"pad_token_id {fallback} is an eos/bos id (no unused embedding row, no pad token)"
    return PadChoice(fallback, FALLBACK, _held_note(what, windowed))


def _named(content: str | None) -> str:
    return f" ({content})" if content else ""


def _held_note(what: str, windowed: bool) -> str:
    """What a prompt holding the pad id gets, and what `run` does about it."""
    if windowed:
        return f"{what}: onnxruntime-genai's windowed inputs cut a prompt at its first pad id (`run` refuses it)"
    return (
        f"{what}: a prompt ending with it gets the first token of the prompt without it through "
        "onnxruntime-genai's own API (`gqa-export run` feeds such a tail one token at a time and stays exact)"
    )


def apply_pad_id(
    config: dict[str, Any], dims: ModelDims, model_dir: Path, row_is_finite: Callable[[int], bool]
) -> PadChoice:
    """Set genai_config's `model.pad_token_id` to the chosen id; returns the choice."""
    windowed = bool(((config["model"].get("decoder") or {}).get("sliding_window") or {}).get("slide_inputs"))
    choice = choose_pad_id(dims, model_dir, row_is_finite, windowed)
    config["model"]["pad_token_id"] = choice.id
    return choice


def finite_rows(store: Any, table: str) -> Callable[[int], bool]:
    """`row_is_finite` over a weight store's embedding table: one row looked at through the shard's
    map (not a counted read); absent from the store (e.g. stored quantized): finite."""

    def finite(row: int) -> bool:
        if table not in store:
            return True
        values = np.asarray(store.view(table)[row], dtype=np.float32)  # integer tables are finite
        store.release(table)
        return bool(np.isfinite(values).all())

    return finite


def token_id(model_dir: Path, token: str) -> int | None:
    """The id the checkpoint's tokenizer.json gives `token` (an added token over the vocabulary's), None where it
    has none: a placeholder genai's processor writes as text while the config names no id (VideoChat-Flash)."""
    return _Tokenizer(model_dir).ids.get(token)


class _Tokenizer:
    """The id-defining facts of a checkpoint's tokenizer files, read once (all optional)."""

    def __init__(self, model_dir: Path) -> None:
        self.data = read_json(model_dir / "tokenizer.json") or {}
        self.config = read_json(model_dir / "tokenizer_config.json") or {}
        self.special_map = read_json(model_dir / "special_tokens_map.json") or {}
        self.template = _chat_templates(model_dir, self.config)
        model = _object(self.data.get("model"))
        vocab = model.get("vocab")
        self.ids: dict[str, int] = {}
        if isinstance(vocab, dict):
            self.ids = {str(k): int(v) for k, v in vocab.items() if _is_id(v)}
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            self.ids = {str(p[0]): i for i, p in enumerate(vocab) if isinstance(p, list) and p}
        added = self.data.get("added_tokens")
        # an id that is not an integer (a hand-edited file) names no row: skipped, as in the vocabulary
        self.added = (
            [t for t in added if isinstance(t, dict) and _is_id(t.get("id"))] if isinstance(added, list) else []
        )
        self.ids |= {str(t.get("content")): int(t["id"]) for t in self.added}

    def length(self) -> int | None:
        """One past the largest id the tokenizer gives; None without tokenizer.json."""
        return max(self.ids.values()) + 1 if self.ids else None

    def content(self, token_id: int) -> str | None:
        return next((text for text, i in self.ids.items() if i == token_id), None)

    def declared(self, key: str) -> int | None:
        """The id of a special token tokenizer_config / special_tokens_map names (string or dict)."""
        value = self.config.get(key) or self.special_map.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        return self.ids.get(value) if isinstance(value, str) else None

    def spare_pad_token(self, special: set[int | None]) -> int | None:
        """The lowest added special token named as a pad that no chat template spells."""
        pads = [
            int(t["id"])
            for t in self.added
            if t.get("special") and "pad" in str(t.get("content", "")).lower()
            and int(t["id"]) not in special and str(t.get("content")) not in self.template
        ]  # fmt: skip
        return min(pads, default=None)

    def unencodable_unk(self) -> int | None:
        """The unknown token of a model with byte fallback: text always encodes to bytes instead."""
        model = _object(self.data.get("model"))
        if not model.get("byte_fallback"):
            return None
        unk = model.get("unk_token")
        if isinstance(unk, str):
            return self.ids.get(unk)
        return int(model["unk_id"]) if _is_id(model.get("unk_id")) else None


def _object(value: Any) -> dict[str, Any]:
    """A JSON object where the tokenizer's format has one; anything else reads as empty."""
    return value if isinstance(value, dict) else {}


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _chat_templates(model_dir: Path, config: dict[str, Any]) -> str:
    """Every chat template's text, joined (tokens they spell are not free to pad with)."""
    texts: list[str] = []
    template = config.get("chat_template")
    if isinstance(template, str):
        texts.append(template)
    elif isinstance(template, list):
        texts += [str(t.get("template", "")) for t in template if isinstance(t, dict)]
    for name in ("chat_template.jinja",):
        path = model_dir / name
        if path.is_file():
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    texts.append(str((read_json(model_dir / "chat_template.json") or {}).get("chat_template") or ""))
    return "\n".join(texts)
