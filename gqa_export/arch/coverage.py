"""Coverage as data: every model type the installed transformers maps to a causal LM or an
image-text-to-text model, and what gqa-export does with it (issue #39 item 2).

A type is exported (a built-in recipe matches it: its attention modes come from its spec, its
precisions from the EP table and the recipe's defaults), refused by name (arch/refused_types.py:
one line saying why), or not applicable (an encoder-decoder's or an encoder's LM head). Nothing is
typed by hand here but the refusals; a type with no entry at all is "missing", which
tests/arch/test_coverage.py fails on, so a new transformers release shows its new types at once.
`gqa-export recipes --coverage` prints the table; the README's family coverage table is
`readme_table()` (regenerate with `python -m gqa_export.arch.coverage README.md`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gqa_export.arch import get_spec
from gqa_export.arch.refused_types import NOT_APPLICABLE, REFUSED
from gqa_export.arch.spec import ArchSpec
from gqa_export.arch.wrapped_decoders import WRAPPED_DECODERS, class_recipe, config_towers, text_only_package
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.recipes import Recipe, builtin_recipes, match_recipe

README_BEGIN = "<!-- family-coverage: generated from gqa_export/arch/coverage.py (arch.coverage.readme_table) -->"
README_END = "<!-- /family-coverage -->"
ALL_MODES = ("gqa", "bias", "split")
STATUSES = ("exported", "refused", "not applicable", "missing")
# where transformers lists a type -> the variable of modeling_auto that holds the list
MAPPINGS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "image-text-to-text": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
}


@dataclass(frozen=True)
class CoverageRow:
    """One model type: its status and, when exported, how (recipe, modes, precisions per EP)."""

    model_type: str
    mappings: tuple[str, ...]  # "causal-lm", "image-text-to-text": where transformers lists it
    architecture: str  # the class transformers maps it to
    status: str  # STATUSES
    recipe: str = ""
    modes: tuple[str, ...] = ()  # attention modes the spec's graph builds
    default_mode: str = ""
    precisions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # EP -> precisions, its default first
    package: str = ""  # what a build writes: "text decoder" or "full multimodal (genai type)"
    reason: str = ""  # a refusal's or a not-applicable type's one line

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "mappings": list(self.mappings),
            "architecture": self.architecture,
            "status": self.status,
            "recipe": self.recipe or None,
            "attention_modes": list(self.modes),
            "default_attention": self.default_mode or None,
            "precisions": {ep: list(p) for ep, p in self.precisions.items()},
            "package": self.package or None,
            "reason": self.reason or None,
        }


def spec_attention_modes(spec: ArchSpec) -> tuple[str, ...]:
    """The attention modes a spec's graph builds: recurrent-state layers and attention sinks live in
    the GQA graph only, ALiBi's per-head score bias in standard Attention only (graph/decoder.py,
    graph/attention.py). A config can narrow them further (chunked attention, a head_dim GQA
    refuses): the build says so in one line."""
    if spec.alibi:
        return ("bias",)
    if spec.mixers is not None or spec.attention_sinks:
        return ("gqa",)
    return ALL_MODES


def installed_types() -> dict[str, dict[str, str]]:
    """model_type -> {mapping name: class name} for the installed transformers' causal-LM and
    image-text-to-text mappings. Read from modeling_auto's source (the literal lists of its
    `*_MAPPING_NAMES`): importing that module needs torch, which the CLI keeps out of its process."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("transformers.models.auto.modeling_auto")
    if spec is None or spec.origin is None:
        raise InputError("cannot find transformers' modeling_auto module: is transformers installed?")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    types: dict[str, dict[str, str]] = {}
    for mapping, variable in MAPPINGS.items():
        call = names[variable]
        assert isinstance(call, ast.Call) and call.args, variable  # OrderedDict([(type, class), ...])
        for model_type, class_name in ast.literal_eval(call.args[0]):
            types.setdefault(model_type, {})[mapping] = class_name
    return dict(sorted(types.items()))


def text_model_type(model_type: str) -> str:
    """The text decoder's model_type as transformers' default config for the type has it (a
    multimodal type's text_config), else the type itself."""
    from transformers import AutoConfig
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # default configs warn about their own defaults
    try:
        text = AutoConfig.for_model(model_type).get_text_config(decoder=True)
    except Exception:  # a config class that cannot be built from its defaults: its own type
        return model_type
    finally:
        logging.set_verbosity(verbosity)
    return str(getattr(text, "model_type", None) or model_type)


def default_towers(model_type: str) -> list[str]:
    """The towers the type's config class can hold (its vision / audio sub-configs, optional ones too:
    Gemma-4-Unified's default has neither), what a build without --text-only refuses to leave out unless the
    recipe builds them (arch/wrapped_decoders.towers_refusal). Read from the class: no config is made."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
    sub_configs = getattr(config_class, "sub_configs", None) or {}
    return config_towers({name: True for name in sub_configs})


def _exported_row(
    model_type: str, mappings: tuple[str, ...], architecture: str, recipe: Recipe, text_only: bool = False
) -> CoverageRow:
    """`text_only`: a build needs --text-only (towers the recipe does not build: a listed class, or a
    default config with a vision or audio sub-config)."""
    modes = spec_attention_modes(get_spec(recipe.arch))
    precisions = {}
    for ep in EPS.values():
        if ep.static_window or set(ep.attention_modes) & set(modes):  # a static EP runs its own graph pair
            default = recipe.default_precision.get(ep.name, ep.default_precision)
            precisions[ep.name] = (default, *(p for p in ep.precisions if p != default))
    mode = recipe.attention.mode
    # the full package where the recipe names the multimodal class itself (not a listed class's decoder family's)
    mm_class = "image-text-to-text" in mappings and architecture in recipe.architectures
    full = recipe.multimodal_model_type if mm_class else None
    package = f"full multimodal ({full})" if full else "text decoder"
    if text_only and (architecture in WRAPPED_DECODERS or not full):  # arch/wrapped_decoders.towers_refusal
        package = text_only_package(architecture)
    return CoverageRow(
        model_type, mappings, architecture, "exported", recipe.name, modes, mode, precisions, package=package
    )


def coverage(recipes: list[Recipe] | None = None) -> list[CoverageRow]:
    """One row per installed model type, sorted by type."""
    recipes = builtin_recipes() if recipes is None else recipes
    rows = []
    for model_type, classes in installed_types().items():
        mappings = tuple(classes)
        architecture = classes.get("image-text-to-text") or classes["causal-lm"]
        rows.append(_row(model_type, mappings, architecture, classes, recipes))
    return rows


def _row(
    model_type: str, mappings: tuple[str, ...], architecture: str, classes: dict[str, str], recipes: list[Recipe]
) -> CoverageRow:
    if model_type in REFUSED:
        return CoverageRow(model_type, mappings, architecture, "refused", reason=REFUSED[model_type])
    if model_type in NOT_APPLICABLE:
        return CoverageRow(model_type, mappings, architecture, "not applicable", reason=NOT_APPLICABLE[model_type])
    text_type = text_model_type(model_type)
    # a listed wrapper first: its checkpoints export with --text-only alone, even where the decoder's recipe also
    # names the type's causal-LM class (Qwen4-Exp's Qwen4ExpForCausalLM); a recipe naming the class itself wins
    # over the decoder family's (Cohere2-Vision's, without logit_scale), as the build's matching has it
    if architecture in WRAPPED_DECODERS:
        try:
            return _exported_row(
                model_type, mappings, architecture, class_recipe(text_type, architecture, recipes), True
            )
        except InputError:
            pass
    for cls in dict.fromkeys(classes.values()):  # the multimodal class first, then the causal-LM one
        try:
            recipe = match_recipe(text_type, cls, recipes)
        except InputError:
            continue
        return _exported_row(model_type, mappings, architecture, recipe, bool(default_towers(model_type)))
    return CoverageRow(model_type, mappings, architecture, "missing")


def _modes_cell(row: CoverageRow) -> str:
    """The spec's modes, the recipe's default marked `*` (auto: the build picks, README Attention modes)."""
    cells = " ".join(f"{m}*" if m == row.default_mode else m for m in row.modes)
    return cells + (" (auto)" if row.default_mode == "auto" else "")


def _precisions_cell(row: CoverageRow) -> str:
    """Every precision some EP builds for the family, then the cpu / cuda defaults."""
    seen = dict.fromkeys(p for precisions in row.precisions.values() for p in precisions)
    defaults = ", ".join(f"{ep} {row.precisions[ep][0]}" for ep in ("cpu", "cuda") if ep in row.precisions)
    return f"{' '.join(sorted(seen, key=_precision_order))} (default {defaults})"


def _precision_order(precision: str) -> int:
    order = ("fp32", "fp16", "bf16", "int8", "int4")
    return order.index(precision) if precision in order else len(order)


def table_rows(rows: list[CoverageRow]) -> list[tuple[str, ...]]:
    """(model type, status, recipe, attention modes, precisions, package / reason) per row: what
    the CLI's rich table and the README's table both print."""
    out = []
    for row in rows:
        if row.status == "exported":
            out.append((row.model_type, row.status, row.recipe, _modes_cell(row), _precisions_cell(row), row.package))
        else:
            out.append((row.model_type, row.status, "", "", "", row.reason or "no entry: add one"))
    return out


def readme_table(rows: list[CoverageRow] | None = None) -> str:
    rows = coverage() if rows is None else rows
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    lines = [
        f"{len(rows)} model types ({summary}); `*`: the recipe's default attention mode, (auto): the build picks.",
        "",
        "| model type | status | recipe | attention modes | precisions | package / reason |",
        "|---|---|---|---|---|---|",
    ]
    for cells in table_rows(rows):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def write_readme_table(readme: Path) -> None:
    """Put `readme_table()` between the README's markers (tests/arch/test_coverage.py compares them)."""
    text = readme.read_text(encoding="utf-8")
    head, found, rest = text.partition(README_BEGIN + "\n")
    _, end, tail = rest.partition(README_END)
    if not found or not end:
        raise SystemExit(f"{readme} lacks the markers {README_BEGIN} ... {README_END}")
    readme.write_text(f"{head}{README_BEGIN}\n{readme_table()}\n{README_END}{tail}", encoding="utf-8")


if __name__ == "__main__":  # python -m gqa_export.arch.coverage README.md
    import sys

    write_readme_table(Path(sys.argv[1]))
