"""YAML recipes: the per-model choices (attention design, defaults per EP), validated by a schema.

A recipe is matched by HF `model_type` (and, where one type has several, the architecture name).
Every key is checked against `SCHEMA`; an error names the file, the line and the key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gqa_export import choices
from gqa_export.choices import KV_CACHE_DTYPES, KV_SCALES
from gqa_export.eps import EPS as EP_TABLE
from gqa_export.errors import InputError
from gqa_export.yaml_schema import compose, read_yaml, validate

ATTENTION_MODES = tuple(choices.ATTENTION_MODES)
EPS = tuple(choices.EPS)
PRECISIONS = tuple(choices.PRECISIONS)

_ATTENTION = {
    "mode": ATTENTION_MODES,
    "packed_qkv": bool,
    "fused_rope": bool,
    # token ids whose runs attend bidirectionally, instead of those the family's spec reads from
    # the config (arch/: BidirectionalRuns)
    "bidirectional_token_ids": [int],
    # gqa: window-sized KV buffers on windowed layers. Off by default: onnxruntime's windowed GQA
    # refuses right-padded batch prompts ("seqlens_k ... is too small for sequence_length").
    "sliding_window_cache": bool,
    # bias: "shared" (in place on the shared buffer) or "growing" (past + new, share buffer off:
    # for beam search, where onnxruntime-genai turns the shared buffer off)
    "bias_cache": ("shared", "growing"),
    # how standard Attention on the shared buffer reads it: "slice" (its first T slots, a [B,1,S,T]
    # bias; fastest on CPU) or "nonpad" (the whole buffer with nonpad_kv_seqlen, no mask on plain
    # causal layers; ORT CUDA's flash/cuDNN path); "auto": slice on CPU, nonpad on CUDA
    "bias_kv_read": ("auto", "slice", "nonpad"),
    # the op of mode bias: standard "attention", or "gqa" (GroupQueryAttention with an
    # attention_bias input where a layer needs one; CPU only: CUDA's GQA runs a bias unfused)
    "bias_op": ("attention", "gqa"),
    # split on CUDA: list the weights in decoder.shared_initializers so that onnxruntime-genai
    # uploads them once for both sessions (opt-in: read from the runtime's code, not run on a GPU)
    "split_shared_weights": bool,
    # multi-head latent attention (DeepSeek): cache the latent + rope key as one kv head (the
    # weight-absorbed form, mode gqa only) instead of expanded per-head K/V (docs/latent-attention.md)
    "latent_cache": bool,
}
# How the dense MLP's gate and up projections run (graph/blocks.py mlp_block)
_MLP = {
    # one [gate | up] MatMul split after (True), or two MatMuls (False); unset: the EP table's
    # packed_gate_up (measured per EP: two MatMuls on CPU). A checkpoint's stored gate_up stays one.
    "packed_gate_up": bool,
}
# Schema nodes: see yaml_schema.py.
SCHEMA: dict[str, Any] = {
    "name!": str,
    "description": str,
    "match!": {"model_types!": [str], "architectures": [str]},
    "arch!": str,
    "genai_model_type": str,
    # the genai type of the full multimodal package (vision + embedding + decoder; --text-only: the
    # decoder alone under genai_model_type), docs/multimodal.md §1
    "multimodal_model_type": str,
    # the LoRA adapter the checkpoint carries that the decoder's weights take merged (source/merged_adapter.py):
    # "auto" (vision in a full multimodal package, where stored), "none", or the adapter's name
    "merged_adapter": str,
    "attention": _ATTENTION,
    "mlp": _MLP,
    "precision": {ep: PRECISIONS for ep in EPS},
    "overrides": {ep: {"attention": _ATTENTION, "mlp": _MLP} for ep in EPS},
    # build options this model should get unless the command line says otherwise (io_options.py)
    "build": {"prune_lm_head": bool, "kv_cache": tuple(KV_CACHE_DTYPES), "kv_scales": tuple(KV_SCALES)},
}


@dataclass(frozen=True)
class AttentionRecipe:
    mode: str = "auto"
    packed_qkv: bool = True
    fused_rope: bool = True
    bidirectional_token_ids: tuple[int, ...] = ()
    sliding_window_cache: bool = False
    bias_cache: str = "shared"
    bias_kv_read: str = "auto"
    bias_op: str = "attention"
    split_shared_weights: bool = False
    latent_cache: bool = False


@dataclass(frozen=True)
class MlpRecipe:
    packed_gate_up: bool | None = None  # None: the EP record's choice (eps.py packed_gate_up)


@dataclass(frozen=True)
class Recipe:
    """A validated recipe with its defaults resolved."""

    name: str
    path: Path
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    arch: str
    genai_model_type: str
    attention: AttentionRecipe
    default_precision: dict[str, str] = field(default_factory=dict)
    description: str = ""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    build_defaults: dict[str, Any] = field(default_factory=dict)
    multimodal_model_type: str | None = None
    mlp: MlpRecipe = MlpRecipe()
    merged_adapter: str = "auto"

    def for_ep(self, ep: str) -> Recipe:
        """The recipe with its per-EP overrides applied."""
        override = self.overrides.get(ep, {})
        attention = _tuples(override.get("attention") or {})
        mlp = override.get("mlp") or {}
        return replace(self, attention=replace(self.attention, **attention), mlp=replace(self.mlp, **mlp))

    def as_dict(self) -> dict[str, Any]:
        """The recipe with every default resolved, as a document `load_recipe` accepts: what
        `gqa-export recipes show` prints is a valid recipe to edit and pass to --recipe."""
        return {
            "name": self.name,
            "match": {"model_types": list(self.model_types), "architectures": list(self.architectures)},
            "arch": self.arch,
            "genai_model_type": self.genai_model_type,
            **({"multimodal_model_type": self.multimodal_model_type} if self.multimodal_model_type else {}),
            # written where it is not the default, so that no recipe's resolved form (nor a manifest) changes
            **({"merged_adapter": self.merged_adapter} if self.merged_adapter != "auto" else {}),
            "attention": {
                **vars(self.attention),
                "bidirectional_token_ids": list(self.attention.bidirectional_token_ids),
            },
            # an unset key is the EP's choice (packed_gate_up), left out rather than written as null
            "mlp": {k: v for k, v in vars(self.mlp).items() if v is not None},
            "precision": dict(self.default_precision),
            "overrides": self.overrides,
            "build": dict(self.build_defaults),
        }


def _tuples(attention: dict[str, Any]) -> dict[str, Any]:
    """YAML lists become the recipe's tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attention.items()}


def recipes_dir() -> Path:
    """Recipes ship inside the wheel (`gqa_export/_recipes`) and live in `recipes/` in a checkout."""
    packaged = Path(__file__).parent / "_recipes"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "recipes"


def load_recipe(path: Path, settings: list[str] | None = None) -> Recipe:
    """Load and validate a recipe; `settings` are `--set key.path=value` overrides."""
    text = read_yaml(path, "recipe")
    if settings:
        text = _apply_settings(text, path, settings)
    data = validate(compose(text, path, "recipe"), SCHEMA, path)
    attention = data.get("attention", {})
    return Recipe(
        name=data["name"],
        path=path,
        model_types=tuple(data["match"]["model_types"]),
        architectures=tuple(data["match"].get("architectures", ())),
        arch=data["arch"],
        genai_model_type=data.get("genai_model_type", "decoder"),
        attention=AttentionRecipe(**_tuples(attention)),
        default_precision={**{ep.name: ep.default_precision for ep in EP_TABLE.values()}, **data.get("precision", {})},
        description=data.get("description", ""),
        overrides=data.get("overrides", {}),
        build_defaults=data.get("build", {}),
        multimodal_model_type=data.get("multimodal_model_type"),
        mlp=MlpRecipe(**data.get("mlp", {})),
        merged_adapter=data.get("merged_adapter", "auto"),
    )


def _split_setting(item: str) -> tuple[str, str]:
    """`key.path=value` -> (key path, the value's YAML text)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise InputError(f"--set expects key=value (e.g. attention.packed_qkv=false), got {item!r}")
    return key, raw


def setting_values(settings: Sequence[str]) -> dict[str, Any]:
    """`--set` overrides as {key path: value}, read as YAML (call `check_settings` first): what a
    build's options already say about the recipe before the recipe is known."""
    out: dict[str, Any] = {}
    for item in settings:
        key, raw = _split_setting(item)
        out[key] = yaml.safe_load(raw) if raw.strip() else None
    return out


def check_settings(settings: Sequence[str]) -> None:
    """Every `--set key.path=value` against the recipe schema before any work, the flag named in
    the error (a typo used to surface after the download, blamed on the installed recipe file)."""
    for item in settings:
        key, raw = _split_setting(item)
        schema: Any = SCHEMA
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(schema, dict):
                raise InputError(f"--set {item}: '{'.'.join(parts[:i])}' takes a value, not keys")
            allowed = {k.rstrip("!"): v for k, v in schema.items()}
            if part not in allowed:
                where = ".".join(parts[: i + 1])
                raise InputError(f"--set {item}: unknown recipe key '{where}' (allowed here: {', '.join(allowed)})")
            schema = allowed[part]
        node = yaml.compose(raw) or yaml.ScalarNode("tag:yaml.org,2002:null", "")
        try:
            validate(node, schema, Path("--set"), key)
        except InputError as exc:
            raise InputError(f"--set {item}: {str(exc).split(': ', 2)[-1]}") from None


def _apply_settings(text: str, path: Path, settings: list[str]) -> str:
    """Merge `a.b=value` pairs into the YAML; the merged text is validated like the file."""
    node = compose(text, path, "recipe")  # bad YAML, bombs and depth are refused before loading
    if not isinstance(node, yaml.MappingNode):
        raise InputError(f"{path}:{node.start_mark.line + 1}: <top>: expected a mapping")
    data = yaml.safe_load(text) or {}
    for item in settings:
        key, raw = _split_setting(item)
        target = data
        parts = key.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise InputError(f"--set {key}: '{part}' is not a mapping in {path.name}")
        target[parts[-1]] = yaml.safe_load(raw)
    return yaml.safe_dump(data, sort_keys=False)


def builtin_recipes() -> list[Recipe]:
    return [load_recipe(p) for p in sorted(recipes_dir().glob("*.yaml"))]


def find_recipe(name: str) -> Recipe:
    """The built-in recipe named `name`: its own file (recipes are named after it) read alone, else
    all of them searched, so that a miss can suggest the closest name."""
    own = recipes_dir() / f"{name}.yaml"
    if re.fullmatch(r"[\w-]+", name) and own.is_file() and (recipe := load_recipe(own)).name == name:
        return recipe
    recipes = builtin_recipes()
    for recipe in recipes:
        if recipe.name == name:
            return recipe
    guess = difflib.get_close_matches(name, [r.name for r in recipes], n=1)
    hint = f" (did you mean '{guess[0]}'?)" if guess else ""
    raise InputError(f"no recipe named '{name}'{hint}; `gqa-export recipes` lists the {len(recipes)} built-in ones")


def match_recipe(model_type: str, architecture: str | None, recipes: list[Recipe]) -> Recipe:
    """The recipe for a model: an architecture-specific match wins over a model_type-only one.

    None matching is one line (it once listed every recipe, ~3,000 characters): the count, where
    the list is, and the --recipe path for a fine-tune of a supported family under its own
    model_type, starting from the closest built-in recipe by architecture name."""
    candidates = [r for r in recipes if model_type in r.model_types]
    specific = [r for r in candidates if architecture and architecture in r.architectures]
    # A config without `architectures` (saved from a bare config class) matches by model_type alone.
    generic = [r for r in candidates if not r.architectures or architecture is None]
    chosen = specific or generic
    if chosen:
        return chosen[0]
    closest = _closest(architecture, recipes)
    start = closest.name if closest else "NAME"
    raise InputError(
        f"unsupported architecture {architecture or '?'} (model_type '{model_type}'): no built-in recipe matches it "
        f"(`gqa-export recipes` lists the {len(recipes)}); for a fine-tune of a supported family pass --recipe FILE, "
        f"e.g. `gqa-export recipes show {start} > my.yaml` with '{model_type}' added to its match.model_types"
    )


def _closest(architecture: str | None, recipes: list[Recipe]) -> Recipe | None:
    """The recipe whose architecture class the checkpoint's is or ends with (LlamaForCausalLM or
    MyLlamaForCausalLM -> llama), if any: a fine-tune that renamed its model_type. Names that are
    merely alike (MambaForCausalLM, JambaForCausalLM) suggest nothing. A class several recipes list
    (EXAONE-3 and InternLM3 run as LlamaForCausalLM) suggests the recipe that lists it first."""
    if not architecture:
        return None
    owners = [((len(a), -i), r) for r in recipes for i, a in enumerate(r.architectures) if architecture.endswith(a)]
    return max(owners, key=lambda owner: owner[0])[1] if owners else None


def config_model_type(recipe: Recipe, recipes: list[Recipe] | None = None) -> str:
    """The transformers model_type whose config class reads a checkpoint under this recipe when
    transformers does not know the checkpoint's own model_type (a fine-tune's custom one): that
    of the built-in recipe with the same arch (every spec has one, tests/base/test_recipes.py)."""
    for builtin in recipes if recipes is not None else builtin_recipes():
        if builtin.arch == recipe.arch:
            return builtin.model_types[0]
    raise InputError(f"recipe {recipe.path} asks for arch '{recipe.arch}', which no built-in recipe uses")
