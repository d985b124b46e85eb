"""The transformers checkpoint folder a GGUF file stands for, written beside the build.

Every stage reads a checkpoint as a folder (config.json, generation_config.json, tokenizer files)
plus a weight store. For a GGUF the folder is written from the file's metadata into a temporary
folder of this process (removed at exit; it holds a few small JSON files) and the weights come
from the GGUF itself (store.py). Files found beside the GGUF (a folder holding it, or a Hub
repository's config and tokenizer) win where present: they are what the model's authors wrote,
where the metadata is llama.cpp's re-encoding; where they disagree with the metadata on a number
that changes the model, that is said in one note line, never silently chosen (docs/gguf.md §2).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gqa_export.errors import InputError
from gqa_export.source.gguf.config import read_config, read_generation_config
from gqa_export.source.gguf.container import GgufFile, open_gguf

# tokenizer files a folder beside the GGUF may hold (any of the first two makes it a tokenizer)
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json",
)  # fmt: skip
# the model card and license files a release carries over (source/fetch.py downloads the same)
CARD_FILES = ("README.MD", "LICENSE", "LICENCE", "COPYING", "NOTICE", "USE_POLICY")
# config keys compared between a config.json beside the file and the metadata
COMPARED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "head_dim", "vocab_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings")  # fmt: skip
_MADE: list[Path] = []


@dataclass(frozen=True)
class GgufOrigin:
    """Where a GGUF checkpoint came from: its file parts and what the folder writing noticed."""

    files: tuple[Path, ...]
    notes: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return self.files[0]


def gguf_in_folder(folder: Path, gguf_file: str | None) -> Path | None:
    """The GGUF a folder stands for: `gguf_file` when given, else its only .gguf model file (split
    parts count as one), or None when it holds no .gguf."""
    if gguf_file is not None:
        path = folder / gguf_file
        if not path.is_file():
            found = sorted(p.name for p in folder.glob("*.gguf"))
            listing = ", ".join(found[:6]) + (" ..." if len(found) > 6 else "") if found else "none"
            raise InputError(f"--gguf-file {gguf_file} is not in {folder} (GGUF files there: {listing})")
        return path
    models = sorted({_first_part(p) for p in folder.glob("*.gguf") if not p.name.startswith("mmproj")})
    if not models:
        return None
    if len(models) > 1:
        names = ", ".join(p.name for p in models[:6])
        raise InputError(f"{folder} holds several GGUF files ({names}); choose one with --gguf-file NAME")
    return models[0]


def _first_part(path: Path) -> Path:
    from gqa_export.source.gguf.container import SPLIT_NAME

    match = SPLIT_NAME.match(path.name)
    if not match:
        return path
    return path.with_name(f"{match.group('stem')}-00001-of-{match.group('count')}.gguf")


def materialize(gguf_path: Path, beside: Path | None = None) -> tuple[Path, GgufOrigin]:
    """Write the checkpoint folder `gguf_path` stands for (module doc); return it and the origin."""
    file = open_gguf(gguf_path)
    config = read_config(file)
    notes: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="gqa-export-gguf-"))
    _MADE.append(folder)
    try:
        side_config = beside / "config.json" if beside is not None else None
        if side_config is not None and side_config.is_file():
            shutil.copy2(side_config, folder / "config.json")
            notes += _config_disagreements(file, config, json.loads(side_config.read_text()))
        else:
            _write(folder / "config.json", config)
        side_generation = beside / "generation_config.json" if beside is not None else None
        if side_generation is not None and side_generation.is_file():
            shutil.copy2(side_generation, folder / "generation_config.json")
        else:
            _write(folder / "generation_config.json", read_generation_config(file))
        _card(file, beside, folder)
        if beside is not None and any((beside / n).is_file() for n in TOKENIZER_FILES[:2]):
            for name in TOKENIZER_FILES:
                if (beside / name).is_file():
                    shutil.copy2(beside / name, folder / name)
            notes += _tokenizer_disagreements(file, folder)
        else:
            write_tokenizer(file, folder, int(config.get("max_position_embeddings", 4096)))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, GgufOrigin(tuple(file.paths), tuple(notes))


def _card(file: GgufFile, beside: Path | None, folder: Path) -> None:
    """The model card and license files a release carries: those beside the file, else a card
    whose front matter holds the metadata's `general.license` (a release needs a license)."""
    found = [
        p
        for p in (beside.iterdir() if beside is not None else [])
        if p.is_file() and p.name.upper().startswith(CARD_FILES)
    ]
    for path in found:
        shutil.copy2(path, folder / path.name)
    license_name = file.metadata.get("general.license")
    if not any(p.name == "README.md" for p in found) and isinstance(license_name, str) and license_name:
        (folder / "README.md").write_text(f"---\nlicense: {license_name}\n---\n")


def _write(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def write_tokenizer(file: GgufFile, folder: Path, context: int) -> None:
    """tokenizer.json / tokenizer_config.json / chat template from `tokenizer.ggml.*`, through
    transformers' GGUF tokenizer conversion fed from this reader's metadata (transformers' own GGUF
    reader imports torch, which the CLI keeps out; tokens checked against llama.cpp's: docs/gguf.md §2)."""
    if not file.metadata.get("tokenizer.ggml.model"):
        raise InputError(
            f"{file.path.name} has no tokenizer (no tokenizer.ggml.model key); put the model's tokenizer.json "
            "beside the file (or in the folder / Hub repository you pass) and run again"
        )
    from transformers import PreTrainedTokenizerFast

    tokenizer_dict, tokenizer_config = _tokenizer_metadata(file)
    try:
        backend, extra = _convert_tokenizer(file.architecture, tokenizer_dict)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot build a tokenizer from {file.path.name}'s metadata: {first}") from None
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **{**tokenizer_config, **extra})
    tokenizer.model_max_length = context
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    for transient in ("is_local", "local_files_only"):
        config.pop(transient, None)
    _write(config_path, config)


def _tokenizer_metadata(file: GgufFile) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tokenizer_dict, tokenizer_config) as transformers' GGUF tokenizer conversion takes them:
    its key renames, llama.cpp's BOS default for sentencepiece vocabularies, special tokens by id."""
    meta = file.metadata
    renames = {"model": "tokenizer_type", "pre": "pre_tokenizer_type", "tokens": "tokens", "scores": "scores",
               "token_type": "token_type", "merges": "merges", "precompiled_charsmap": "precompiled_charsmap",
               "bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "unknown_token_id": "unk_token_id",
               "padding_token_id": "pad_token_id", "add_space_prefix": "add_prefix_space"}  # fmt: skip
    tokenizer = {
        name: meta[f"tokenizer.ggml.{key}"] for key, name in renames.items() if f"tokenizer.ggml.{key}" in meta
    }
    config: dict[str, Any] = {}
    if meta.get("tokenizer.chat_template"):
        config["chat_template"] = meta["tokenizer.chat_template"]
    for key in ("add_bos_token", "add_eos_token"):
        if f"tokenizer.ggml.{key}" in meta:
            config[key] = bool(meta[f"tokenizer.ggml.{key}"])
    if tokenizer.get("tokenizer_type") == "llama":  # llama.cpp adds BOS to a sentencepiece vocabulary by default
        config.setdefault("add_bos_token", True)
    tokens = tokenizer.get("tokens") or []
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unk_token_id"),
                      ("pad_token", "pad_token_id")):  # fmt: skip
        index = tokenizer.get(key)
        config[name] = tokens[int(index)] if index is not None and 0 <= int(index) < len(tokens) else None
    return tokenizer, config


def _convert_tokenizer(architecture: str, tokenizer_dict: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """transformers' GGUF tokenizer builder: its 5.x module, else the 4.x one (same call)."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError:  # transformers 4.x
        from transformers.integrations.ggml import convert_gguf_tokenizer  # type: ignore[attr-defined,no-redef]
    return convert_gguf_tokenizer(architecture, tokenizer_dict)


def _config_disagreements(file: GgufFile, ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    text = theirs.get("text_config") if isinstance(theirs.get("text_config"), dict) else theirs
    params = text.get("rope_parameters") if isinstance(text.get("rope_parameters"), dict) else {}
    own_params = ours.get("rope_parameters") if isinstance(ours.get("rope_parameters"), dict) else {}  # gpt-oss
    differ = []
    for key in COMPARED:
        mine = ours.get(key, own_params.get(key) if key == "rope_theta" else None)
        given = text.get(key, params.get(key) if key == "rope_theta" else None)
        if mine is None or given is None:
            continue
        if isinstance(mine, float):
            same = abs(float(mine) - float(given)) <= 1e-6 * max(1.0, abs(float(given)))
        else:
            same = mine == given
        if not same:
            differ.append(f"{key} {mine} (GGUF) vs {given} (config.json)")
    if not differ:
        return []
    where = f"config.json beside {file.path.name}"
    return [f"{where} disagrees with its metadata on {'; '.join(differ)}: config.json is used"]


def _tokenizer_disagreements(file: GgufFile, folder: Path) -> list[str]:
    path = folder / "tokenizer.json"
    tokens = file.metadata.get("tokenizer.ggml.tokens")
    if not path.is_file() or not tokens:
        return []
    data = json.loads(path.read_text())
    vocab = dict((data.get("model") or {}).get("vocab") or {})
    if isinstance(vocab, dict):
        vocab.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
        size = max(vocab.values(), default=-1) + 1
    else:
        size = len(vocab)
    if size == len(tokens):
        return []
    where = f"tokenizer.json beside {file.path.name}"
    return [f"{where} has {size} tokens, its metadata {len(tokens)}: tokenizer.json is used"]


def remove_made(folder: Path) -> None:
    """Remove a folder `materialize` wrote (and only such a folder)."""
    if folder in _MADE:
        _MADE.remove(folder)
        shutil.rmtree(folder, ignore_errors=True)


@atexit.register
def _remove_all_made() -> None:
    for folder in list(_MADE):
        remove_made(folder)
