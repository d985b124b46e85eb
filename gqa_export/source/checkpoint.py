"""A checkpoint resolved to a local folder, read the way every stage reads it.

The config is read twice on purpose: config.json's raw JSON first (the architecture is named and
its size keys checked before transformers is asked about it), then transformers' own config
object, which resolves every spelling (4.x and 5.x keys, layer patterns). `source_dims` is that
same reading for checks that need a model's resolved shape without building it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from gqa_export.arch import get_spec
from gqa_export.arch.refused_types import refusal_for
from gqa_export.arch.wrapped_decoders import WRAPPED_DECODERS, class_recipe
from gqa_export.errors import InputError
from gqa_export.jsonio import read_json_object
from gqa_export.model.dims import ModelDims, read_dims
from gqa_export.model.raw_config import check_raw_config
from gqa_export.model.spec_choices import chosen_spec
from gqa_export.progress import Reporter
from gqa_export.recipes import Recipe, builtin_recipes, config_model_type, load_recipe
from gqa_export.source.fetch import Source, resolve_source
from gqa_export.source.file_reader import FileReader
from gqa_export.source.formats import file_format
from gqa_export.source.release_layouts import converted_config, release_model_type
from gqa_export.source.weights import WeightStore


class Checkpoint:
    """A resolved checkpoint: the folder, its config.json, and (read on first use) its HF config,
    generation config and weight store. A release opens it once for all of its variants: one
    fetch, one parse, one set of memory-mapped shards whose pages every variant reuses."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.raw_config = read_json_object(source.model_dir / "config.json")
        # the transformers model_type config.json is read as when transformers does not know its own
        # (a fine-tune's custom model_type, exported with --recipe): set before `configs` is read
        self.read_as: str | None = None

    @cached_property
    def configs(self) -> tuple[Any, dict[str, Any] | None]:
        return read_configs(self.source.model_dir, self.read_as)

    def read_for(self, recipe: Recipe) -> str | None:
        """Read the configs as a user's recipe says: a model_type transformers does not know is read
        with the config class of the recipe's arch. Returns the note saying so (None: not needed)."""
        self.read_as = config_model_type(recipe)
        self.configs  # noqa: B018
        own = self.raw_config.get("model_type")
        if known_model_type(own):
            return None
        how = f"'{self.read_as}' (the config class of the recipe's arch, {recipe.arch})"
        return f"transformers does not know model_type '{own}': config.json read as {how}"

    @cached_property
    def store(self) -> WeightStore:
        if self.source.gguf is not None:  # the file's own tensors under their HF names (docs/gguf.md)
            return _file_reader(self.source.gguf.path).module().open_store(self.source.gguf.path, self.raw_config)
        return WeightStore.open(self.source.model_dir)

    def close(self) -> None:
        """Remove what reading the source wrote: a GGUF's config/tokenizer folder (never a user's folder)."""
        if self.source.gguf is not None:
            _file_reader(self.source.gguf.path).module().remove_made(self.source.model_dir)


def _file_reader(path: Path) -> FileReader:
    """The reader of the checkpoint file format (source/formats.py) a Source's file is."""
    fmt = file_format(path)
    assert fmt is not None and fmt.file is not None, path
    return fmt.file


def open_checkpoint(
    model: str, revision: str | None = None, reporter: Reporter | None = None, gguf_file: str | None = None
) -> Checkpoint:
    return Checkpoint(resolve_source(model, revision, reporter, gguf_file))


def _strict_errors() -> tuple[type[Exception], ...]:
    """huggingface_hub's strict-dataclass error (>= 0.35; transformers 5 validates configs with it)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return ()
    return (StrictDataclassError,)


_STRICT = _strict_errors()


def read_configs(model_dir: Path, read_as: str | None = None) -> tuple[Any, dict[str, Any] | None]:
    """transformers' config and the generation config. `read_as`: a transformers model_type whose
    config class reads config.json when transformers does not know the checkpoint's own model_type
    (AutoConfig refuses it; its remote code, if any, is never run). The config keeps the
    checkpoint's model_type, which the manifest records."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw = read_json_object(model_dir / "config.json")
    own = raw.get("model_type")
    release = release_model_type(raw)  # a remote-code release transformers ported (source/release_layouts.py)
    try:
        if release is not None and not known_model_type(own):
            config = CONFIG_MAPPING[release].from_dict(converted_config(raw))
            config.model_type = str(own)
        elif read_as is not None and not known_model_type(own):
            config = _quietly(lambda: CONFIG_MAPPING[read_as].from_pretrained(model_dir))
            config.model_type = str(own)
        else:
            config = AutoConfig.from_pretrained(model_dir)
    except (ValueError, KeyError, OSError, TypeError, AttributeError, *_STRICT) as exc:
        # transformers 5's configs are strict dataclasses: a key of the wrong type or sizes that
        # contradict each other raise huggingface_hub's validation error, the reason in its cause; a
        # key the class holds as a read-only property (Falcon's head_dim) raises AttributeError
        reason = exc.__cause__ if isinstance(exc, _STRICT) and exc.__cause__ is not None else exc
        first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
        raise InputError(f"cannot read {model_dir / 'config.json'}: {_shortened(first)}") from None
    gen_path = model_dir / "generation_config.json"
    return config, read_json_object(gen_path) if gen_path.is_file() else None


def known_model_type(model_type: object) -> bool:
    """Whether transformers has a config class for this model_type (AutoConfig reads it)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def _quietly(read: Callable[[], Any]) -> Any:
    """transformers' own warning for a config read by another type's class ("You are using a model
    of type X to instantiate a model of type Y") is the point here: the build says it in a note."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        return read()
    finally:
        logging.set_verbosity(level)


def _shortened(message: str, limit: int = 300) -> str:
    """A library's first line, cut at a sentence end within `limit` characters (transformers'
    unknown-model_type line runs on with advice that does not apply here)."""
    if len(message) <= limit:
        return message
    cut = message.rfind(". ", 0, limit)
    return message[: cut + 1] if cut > 0 else message[:limit] + "..."


def match_builtin(raw: dict[str, Any], model_dir: Path) -> Recipe:
    """The built-in recipe for a config.json. Multimodal checkpoints match on their text model's
    type (one recipe per decoder family) and the top-level architecture; a text_config without a
    model_type gets the one transformers fills in."""
    outer = str(raw.get("model_type", "?"))
    refused = refusal_for(outer)  # by name, before transformers is asked (arch/refused_types.py)
    if refused:
        raise InputError(refused)
    architectures = raw.get("architectures") or [None]
    if not isinstance(architectures, list) or not isinstance(architectures[0], (str, type(None))):
        shown = json.dumps(architectures)[:80]
        raise InputError(f"config.json's architectures is {shown}, not a list of class names; fix or remove it")
    architecture = architectures[0]
    text = raw.get("text_config")
    model_type = outer
    if isinstance(text, dict):
        model_type = str(text.get("model_type") or text_config_of(read_configs(model_dir)[0]).model_type)
    elif architecture in WRAPPED_DECODERS:  # its text config at the top level (dots3-note's releases)
        model_type = str(text_config_of(read_configs(model_dir)[0]).model_type)
    try:  # a multimodal class around an exported decoder matches its family's: --text-only (plan/model_phase.py)
        return class_recipe(model_type, architecture, builtin_recipes())
    except InputError:
        # a listed class's text type its config class renames (Kimi-K2.5's release: `kimi_k2`, its remote code's
        # name, which Kimi_K25Config reads as deepseek_v3): the type transformers builds the decoder as
        if isinstance(text, dict) and architecture in WRAPPED_DECODERS:
            resolved = str(text_config_of(read_configs(model_dir)[0]).model_type)
            if resolved != model_type:
                return class_recipe(resolved, architecture, builtin_recipes())
        refused = refusal_for(model_type)  # a refused text decoder under a class no recipe lists
        if refused:
            raise InputError(refused) from None
        raise


def source_dims(model_dir: Path, recipe_file: Path | None = None) -> ModelDims:
    """A local checkpoint's dimensions read exactly as `build` reads them with its built-in recipe,
    or `recipe_file` as --recipe gives it (transformers' config, the family's spec): what `inspect
    --source` checks a package against, and a release's eval window."""
    raw = read_json_object(model_dir / "config.json")
    recipe = load_recipe(recipe_file) if recipe_file is not None else match_builtin(raw, model_dir)
    check_raw_config(raw)
    hf_config, generation = read_configs(model_dir, config_model_type(recipe) if recipe_file is not None else None)
    text_config = text_config_of(hf_config)
    outer = hf_config if text_config is not hf_config else None
    return read_dims(text_config, chosen_spec(get_spec(recipe.arch), text_config), generation, outer)


def text_config_of(config: Any) -> Any:
    """The text decoder's config: the config itself, or a multimodal config's text_config."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config
