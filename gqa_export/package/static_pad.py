"""The pad id of a static-shape (windowed-input) package (docs/eps.md §7.7).

onnxruntime-genai pads the prompt to whole windows with `pad_token_id` and takes the prompt's real
length as the position of its first `pad_token_id`, so a prompt holding that id is cut there (and
the prompt's logits are read at its last non-pad token). The dynamic packages' fallback (the first
eos id when the model names no pad) is a token every multi-turn chat prompt holds; a windowed
package therefore takes an id prompts cannot contain where the model has one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gqa_export.graph.dims import ModelDims


def static_pad_id(dims: ModelDims, model_dir: Path, fallback: int) -> tuple[int, str | None]:
    """(pad id, build note or None): the model's own pad when it is no eos/bos id; else the first
    embedding row past every tokenizer id; else `fallback` (the other packages' id), with a note."""
    special = {*dims.eos_token_ids, dims.bos_token_id}
    if dims.pad_token_id is not None and dims.pad_token_id not in special:
        return dims.pad_token_id, None
    unused = _tokenizer_length(model_dir)
    if unused is not None and unused < dims.vocab_size:
        return unused, f"pad_token_id {unused}: an embedding row no tokenizer id uses (prompts cannot hold it)"
    return fallback, (
        f"pad_token_id {fallback} is an eos/bos id (no unused embedding row): onnxruntime-genai's windowed "
        f"inputs cut a prompt at its first {fallback} (e.g. a chat's earlier turns); `run` refuses such prompts"
    )


def _tokenizer_length(model_dir: Path) -> int | None:
    """One past the largest id tokenizer.json gives (vocabulary and added tokens); None without it."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    vocab = (data.get("model") or {}).get("vocab")
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    ids += [int(t["id"]) for t in data.get("added_tokens") or []]
    return max(ids) + 1 if ids else None


def apply_static_pad(config: dict[str, Any], dims: ModelDims, model_dir: Path) -> list[str]:
    """Set a windowed package's genai_config pad_token_id; returns the build notes."""
    model = config["model"]
    model["pad_token_id"], note = static_pad_id(dims, model_dir, model["pad_token_id"])
    return [note] if note else []
