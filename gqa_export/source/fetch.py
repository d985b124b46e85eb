"""Stage 1: resolve a model argument to a local folder.

A local folder is used in place. A Hub id goes through `huggingface_hub.snapshot_download` into
the normal HF cache, fetching only what an export needs (config, generation config, safetensors
and their index, tokenizer files, and the model card and license files a release carries) and
never pickle weights. `HF_TOKEN` and `HF_HUB_OFFLINE` are
honoured by huggingface_hub itself.

What the user can fix is bad input (exit 2: an id or revision that does not exist, a gated model
without a token, a 4xx answer, HF_HUB_OFFLINE set with nothing cached); what fails outside the
input is a failed run (exit 1: the Hub cannot be reached, a 5xx or 429 answer, a timeout, a proxy,
the cache's disk), as for every other command (README, Faults).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gqa_export.errors import InputError, RunError
from gqa_export.progress import NullReporter, Reporter
from gqa_export.source.format_records import SourceFormat
from gqa_export.source.formats import GGUF, file_format, folder_file_format

if TYPE_CHECKING:
    from gqa_export.source.gguf import GgufOrigin

# The tokenizer files a package carries (package.copy_tokenizer copies these from the source).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    *TOKENIZER_FILES,
    "chat_template.jinja",
    "chat_template.json",
    # the model card and license files a release carries over (a few KB)
    "README.md",
    "LICENSE*",
    "LICENCE*",
    "COPYING*",
    "NOTICE*",
    "USE_POLICY*",
]


@dataclass(frozen=True)
class Source:
    """A checkpoint folder on disk and where it came from."""

    model_dir: Path
    source_id: str
    revision: str | None  # the Hub commit hash; None for a local folder
    is_local: bool
    # a GGUF model file: model_dir is the config/tokenizer folder written from its metadata
    # (source/gguf/folder.py), the weights are the file's own (docs/gguf.md)
    gguf: GgufOrigin | None = None


def looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or "\\" in model


def resolve_source(
    model: str, revision: str | None = None, reporter: Reporter | None = None, gguf_file: str | None = None
) -> Source:
    """Return the folder holding `model`: a local folder as is, a Hub id downloaded (or cached); a
    GGUF file (or a folder holding one, or a Hub id with `gguf_file`) as the folder its metadata
    means (docs/gguf.md)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if revision:
            raise InputError(f"--revision applies to Hub ids, but '{model}' is a local folder")
        found = _file_of_folder(path, gguf_file)
        if found is not None:
            return _file_source(*found, str(found[1].resolve()), None, True, path)
        _require_config(path, model)
        return Source(path.resolve(), str(path.resolve()), None, True)
    if path.exists():
        fmt = file_format(path)
        if fmt is not None:  # a checkpoint file format (GGUF): source/formats.py
            if revision or gguf_file:
                raise InputError(
                    f"'{model}' is a {fmt.name} file: --revision and --gguf-file apply to Hub ids and folders"
                )
            return _file_source(fmt, path, str(path.resolve()), None, True, path.parent)
        raise InputError(f"'{model}' is a file; pass a Hugging Face model folder, a GGUF file or a Hub id")
    if looks_like_path(model):
        raise InputError(f"local folder '{model}' does not exist")
    folder = _download(model, revision, reporter or NullReporter(), gguf_file)
    if gguf_file is not None:
        found = _file_of_folder(folder, gguf_file)
        assert found is not None
        return _file_source(*found, f"{model}:{gguf_file}", folder.name, False, folder)
    _require_config(folder, model)
    return Source(folder, model, folder.name, False)


def _file_of_folder(folder: Path, gguf_file: str | None) -> tuple[SourceFormat, Path] | None:
    """The checkpoint file a folder stands for (a GGUF: source/formats.py): --gguf-file, or its only
    such file when it holds no safetensors; None for a checkpoint folder."""
    fmt = GGUF if gguf_file is not None else folder_file_format(folder)
    if fmt is None or fmt.file is None or (gguf_file is None and any(folder.glob("*.safetensors"))):
        return None
    found = fmt.file.module().in_folder(folder, gguf_file)
    return (fmt, found) if found is not None else None


def _file_source(
    fmt: SourceFormat, path: Path, source_id: str, revision: str | None, is_local: bool, beside: Path
) -> Source:
    """A checkpoint file as the folder its metadata means (written by its reader) and its origin."""
    assert fmt.file is not None
    folder, origin = fmt.file.module().materialize(path, beside)
    return Source(folder, source_id, revision, is_local, origin)


def gguf_patterns(gguf_file: str) -> list[str]:
    """What a Hub fetch of one GGUF downloads: that file (every part of a split one) and the
    repository's config and tokenizer files where it has them."""
    from gqa_export.source.gguf.container import SPLIT_NAME

    match = SPLIT_NAME.match(Path(gguf_file).name)
    name = gguf_file if not match else gguf_file.replace(f"-{match.group('no')}-of-", "-*-of-")
    return [name, "config.json", "generation_config.json", *TOKENIZER_FILES, "chat_template.jinja",
            "chat_template.json", "README.md", "LICENSE*"]  # fmt: skip


def _download(repo_id: str, revision: str | None, reporter: Reporter, gguf_file: str | None = None) -> Path:
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import snapshot_download

    reporter.stage(f"fetch {repo_id}" + (f"@{revision}" if revision else ""))
    try:
        bar = reporter.download_bar()
        extra = {"tqdm_class": bar} if bar is not None else {}
        patterns = ALLOW_PATTERNS if gguf_file is None else gguf_patterns(gguf_file)
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=patterns, **extra)
    except hf_errors.RevisionNotFoundError:
        raise InputError(f"revision '{revision}' of '{repo_id}' was not found on the Hugging Face Hub") from None
    except hf_errors.GatedRepoError:
        raise InputError(
            f"'{repo_id}' is gated: accept its license on the Hub and set HF_TOKEN to a token with access"
        ) from None
    except hf_errors.RepositoryNotFoundError:
        raise InputError(
            f"model '{repo_id}' was not found on the Hugging Face Hub "
            "(check the id, or set HF_TOKEN for a private model)"
        ) from None
    except hf_errors.LocalEntryNotFoundError:
        what = f"revision '{revision}' of '{repo_id}'" if revision else f"model '{repo_id}'"
        offline = _offline_variable()
        if offline is not None:
            raise InputError(
                f"{what} is not in the local Hugging Face cache and {offline} is set, so the Hub is not asked "
                f"(unset {offline} to download it, or pass a local folder)"
            ) from None
        raise RunError(  # the network, not the input: exit 1 (README, Faults)
            f"{what} is not in the local Hugging Face cache and the Hub cannot be reached "
            "(check the connection or proxy, or pass a local folder)"
        ) from None
    except hf_errors.HfHubHTTPError as exc:  # the Hub's answer: a server error is outside the input
        status = getattr(getattr(exc, "response", None), "status_code", None)
        kind = InputError if isinstance(status, int) and 400 <= status < 500 and status != 429 else RunError
        raise kind(f"could not fetch '{repo_id}' from the Hugging Face Hub: {_first_line(exc)}") from None
    except ValueError as exc:
        raise InputError(f"could not fetch '{repo_id}' from the Hugging Face Hub: {_first_line(exc)}") from None
    except OSError as exc:  # the connection, the cache's disk or permissions
        raise RunError(f"could not fetch '{repo_id}' from the Hugging Face Hub: {_first_line(exc)}") from None
    except Exception as exc:
        if not _is_network_error(exc):
            raise
        raise RunError(
            f"could not reach the Hugging Face Hub for '{repo_id}' ({type(exc).__name__}: {_first_line(exc)}); "
            "check the connection or proxy, or pass a local folder"
        ) from None
    return Path(folder)


def _offline_variable() -> str | None:
    """The variable that put huggingface_hub offline (it reads both), or None when it is online:
    the advice to unset one is given only to someone who has set it."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return None
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return name
    return "HF_HUB_OFFLINE"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_network_error(exc: BaseException) -> bool:
    """Transport errors of the HTTP client huggingface_hub uses (httpx2 in 2.x, httpx in 1.x, requests before)."""
    for module, name in (("httpx2", "HTTPError"), ("httpx", "HTTPError"), ("requests", "RequestException")):
        try:
            base = getattr(__import__(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(exc, base):
            return True
    return False


def _require_config(folder: Path, model: str) -> None:
    if not (folder / "config.json").is_file():
        raise InputError(f"'{model}' has no config.json; it is not a Hugging Face model folder")
