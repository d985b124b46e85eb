"""The release spec: one YAML file naming a source and the variants to publish from it.

    source: meta-llama/Llama-3.2-1B        # Hub id, or a folder (relative to this file)
    revision: main                         # Hub branch, tag or commit
    license: llama3.2                      # default: the source model card's
    eval: {text: eval.txt}                 # perplexity of every variant (and the gates)
    variants:
      - {ep: cpu, precision: fp32}
      - {ep: cpu, precision: int4, gate: {max_ppl_increase: 5}}
      - {ep: cuda, precision: fp16}
      - {ep: cuda, precision: int4, block_size: 128}
      - {ep: cpu, precision: int4, path: cpu-lora, lora_targets: [q_proj, v_proj]}   # multi-LoRA base
      - {ep: cpu, precision: fp32, lora_targets: [q_proj, v_proj], adapters: [peft/french]}  # + its adapters
      - {ep: cpu, precision: int4, path: cpu-text, text_only: true}   # a multimodal source's decoder alone
      - {ep: cpu, precision: int4, path: cpu-int8-vision, encoder_precision: int8}  # its vision linears int8

Validated like recipes (file:line: key errors). Every variant's options are checked here, before
anything is fetched, and each gets the folder the published ORT GenAI model repositories use.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import yaml

from gqa_export import eps
from gqa_export.errors import InputError
from gqa_export.plan.request_phase import resolve_request
from gqa_export.quant.quantize import FLOAT_DTYPES, QuantOptions
from gqa_export.request.records import BuildOptions, SpeculativeOptions
from gqa_export.request.table import BY_KEY, RELEASE, VARIANT
from gqa_export.request.values import parse_command_line, spec_schema, with_values
from gqa_export.source.fetch import looks_like_path
from gqa_export.yaml_schema import compose, read_yaml, validate

_VARIANT = {
    **spec_schema(VARIANT),  # every build option a variant takes (request/table.py)
    "adapters": [str],  # PEFT LoRA folders shipped converted beside that base (docs/lora.md §8)
    "path": str,
    # fail the release when this variant's perplexity exceeds the float variant's by more than
    # max_ppl_increase percent; `against` names another variant's path instead
    "gate": {"max_ppl_increase!": float, "against": str},
}
SCHEMA = {
    "source!": str,
    **spec_schema(RELEASE),  # the build options a whole release takes (request/table.py)
    "name": str,
    "repo": str,  # the Hub repository the release is uploaded to (the card's download command)
    "base_model": str,
    "license": str,
    "tags": [str],
    "eval": {"text!": str, "window": int, "stride": int, "max_tokens": int},
    "variants!": [_VARIANT],
}


@dataclass(frozen=True)
class Gate:
    max_ppl_increase: float  # percent over the reference variant's perplexity


@dataclass(frozen=True)
class Variant:
    path: str  # folder inside the release, POSIX style
    options: BuildOptions  # output is set when the release is built
    gate: Gate | None = None
    reference: str | None = None  # the float variant evaluation compares this one with
    draft: str | None = None  # `build --draft` (docs/speculative.md)
    speculative: SpeculativeOptions = field(
        default_factory=SpeculativeOptions
    )  # its draft_tokens / min_adaptive_k / cooldown keys
    adapters: tuple[str, ...] = ()  # PEFT folders, converted into `<folder name>.onnx_adapter` (docs/lora.md §8)
    where: str = "variants"  # "spec.yaml:LINE: variants[i]", prefixed to what is wrong with this variant


@dataclass(frozen=True)
class EvalSpec:
    text: Path
    window: int | None = None
    stride: int | None = None
    max_tokens: int | None = None
    where: str = "eval"  # "spec.yaml:LINE: eval", prefixed to what is wrong with this section


@dataclass(frozen=True)
class ReleaseSpec:
    file: Path
    source: str
    revision: str | None
    variants: tuple[Variant, ...]
    gguf_file: str | None = None
    name: str | None = None
    repo: str | None = None
    base_model: str | None = None
    license: str | None = None
    tags: tuple[str, ...] = ()
    eval: EvalSpec | None = None
    smoke: bool = True


def load_spec(path: Path) -> ReleaseSpec:
    text = read_yaml(path, "release spec")
    node = compose(text, path, "release spec")
    data = validate(node, SCHEMA, path)
    lines = _variant_lines(node)
    if not data["variants"]:
        raise InputError(f"{path}:{lines.get(-1, 1)}: variants: the list is empty; name at least one variant")
    base = path.resolve().parent
    top = {key: value for key, value in data.items() if key in BY_KEY and key != "set"}  # revision, recipe, smoke
    shared = with_values(BuildOptions(model=_source(data["source"], base), output=Path(".")), top, base)
    if data.get("revision") and shared.model != data["source"] and Path(shared.model).is_dir():
        raise InputError(f"{path}: revision applies to Hub ids, but source '{data['source']}' is a local folder")
    variants = [
        _variant(item, shared, tuple(data.get("set", ())), base, f"{path}:{lines[i]}: variants[{i}]")
        for i, item in enumerate(data["variants"])
    ]
    variants = [replace(v, draft=_source(v.draft, base)) if v.draft else v for v in variants]
    variants = [_with_adapters(v, item, base, f"{path}:{lines[i]}: variants[{i}]")
                for i, (v, item) in enumerate(zip(variants, data["variants"], strict=True))]  # fmt: skip
    _check_paths(variants, path, lines)
    variants = _with_gates(variants, data["variants"], path, lines)
    evaluation = None
    if "eval" in data:
        e = data["eval"]
        where = f"{path}:{_key_line(node, 'eval')}: eval"
        evaluation = EvalSpec(base / e["text"], e.get("window"), e.get("stride"), e.get("max_tokens"), where)
        if not evaluation.text.is_file():
            raise InputError(f"{path}: eval.text {e['text']} does not exist (paths are relative to the spec)")
        _check_eval_ranges(evaluation)
        static = [v.path for v in variants if eps.EPS[v.options.ep].static_window]  # docs/eps.md §7.5
        if static:
            raise InputError(
                f"{where}: variant {static[0]} is a static-shape (QNN) package, which eval cannot score; drop one"
            )
    elif any(v.gate for v in variants):
        raise InputError(f"{path}: a variant has a gate but the spec has no eval.text to measure it on")
    return ReleaseSpec(
        file=path,
        source=shared.model,
        revision=shared.revision,
        variants=tuple(variants),
        gguf_file=shared.gguf_file,
        name=data.get("name"),
        repo=data.get("repo"),
        base_model=data.get("base_model"),
        license=data.get("license"),
        tags=tuple(data.get("tags", ())),
        eval=evaluation,
        smoke=shared.smoke,
    )


def _with_adapters(variant: Variant, item: dict, base: Path, where: str) -> Variant:
    """The variant's PEFT adapter folders (relative to the spec), checked before anything is fetched."""
    folders = item.get("adapters") or []
    if not folders:
        return variant
    if not variant.options.lora_targets:
        raise InputError(f"{where}: adapters need a multi-LoRA base: add lora_targets: [q_proj, ...] to this variant")
    resolved = []
    for folder in folders:
        local = (base / folder).expanduser()
        if not (local / "adapter_config.json").is_file():
            raise InputError(f"{where}: adapters: {folder} is not a PEFT adapter folder (no adapter_config.json)")
        resolved.append(local.resolve())
    names = [p.name for p in resolved]
    if len(set(names)) != len(names):
        raise InputError(
            f"{where}: adapters: two folders are named alike ({', '.join(names)}); each ships as NAME.onnx_adapter"
        )
    return replace(variant, adapters=tuple(str(p) for p in resolved))


def _source(source: str, base: Path) -> str:
    """A folder (or GGUF file) relative to the spec, or a Hub id as written."""
    local = (base / source).expanduser() if not Path(source).expanduser().is_absolute() else Path(source).expanduser()
    if looks_like_path(source) or local.is_dir() or local.is_file():
        return str(local)
    return source


def _variant(item: dict, shared: BuildOptions, common_set: tuple[str, ...], base: Path, where: str) -> Variant:
    """One variant's request from its declared keys (request/table.py), checked as `build` checks
    its options before the fetch (phase 1), each refusal naming the spec's line and variant."""
    ep, precision = item["ep"], item["precision"]
    quant_keys = [k for k in QUANT_KEYS if k in item]
    if precision in FLOAT_DTYPES and quant_keys:
        raise InputError(
            f"{where}: quantization options ({', '.join(quant_keys)}) apply to int4/int8 variants, not {precision}"
        )
    declared = {key: value for key, value in item.items() if key in BY_KEY}
    declared["set"] = (*common_set, *item.get("set", ()))
    options = with_values(shared, declared, base)
    if "lora_targets" in item:
        options = replace(
            options, lora_targets=parse_command_line(BY_KEY["lora_targets"], ",".join(item["lora_targets"]))
        )
    path = item.get("path") or folder_name(ep, precision, options.quant)
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts or "\\" in path or not path.strip("/"):
        raise InputError(f"{where}: path '{path}' must be a relative folder inside the release")
    tuning = [key for key in ("draft_tokens", "min_adaptive_k", "cooldown") if key in item]
    if tuning and "draft" not in item:
        raise InputError(f"{where}: {tuning[0]} needs a draft")
    if item.get("adapters") and "draft" in item:
        raise InputError(f"{where}: draft with adapters is not supported (not probed with a draft); drop one")
    if options.max_length is not None and options.max_length < 1:  # its upper bound: once the config is read
        raise InputError(f"{where}: max_length must be at least 1, got {options.max_length}")
    try:  # what `build` (and `build --draft`) refuse on the options alone, before anything is fetched
        resolve_request(options, output=False)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    draft, speculative = options.draft, options.speculative
    options = replace(options, draft=None, speculative=SpeculativeOptions())  # the variant's runner pairs them
    return Variant(str(PurePosixPath(path)), options, draft=draft, speculative=speculative, where=where)


# the spec keys of the int4/int8 options (a float variant given one is refused, naming it)
QUANT_KEYS = (
    "block_size", "asymmetric", "quant_method", "accuracy_level", "keep_float", "quant_embeddings", "activations",
    "mixed_precision",
)  # fmt: skip


def folder_name(ep: str, precision: str, quant: QuantOptions) -> str:
    """The published ORT GenAI repositories' layout: `cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4`,
    `cuda/cuda-fp16`, `cuda/cuda-int4-rtn-block-32`; options they do not name get a suffix."""
    name = f"{eps.EPS[ep].release_prefix or ep}-{precision}"
    if precision not in FLOAT_DTYPES:
        level = quant.accuracy_level if quant.accuracy_level is not None else eps.EPS[ep].accuracy_level
        name += f"-{quant.method}-block-{quant.block_size}"
        default_asymmetric = quant.method != "search"
        if quant.asymmetric is not None and quant.asymmetric != default_asymmetric:
            name += "-asym" if quant.asymmetric else "-sym"
        name += f"-acc-level-{level}" if level else ""
        if quant.activations not in (None, eps.EPS[ep].quantized_activations[0]):
            name += f"-{quant.activations}"
    return f"{eps.EPS[ep].release_folder}/{name}"


def _check_paths(variants: list[Variant], path: Path, lines: dict[int, int]) -> None:
    """No two variants in one folder, and none inside another's."""
    for i, variant in enumerate(variants):
        for j, other in enumerate(variants[:i]):
            same = variant.path == other.path
            if same or variant.path.startswith(other.path + "/") or other.path.startswith(variant.path + "/"):
                raise InputError(
                    f"{path}:{lines[i]}: variants[{i}] lands in {variant.path}, "
                    f"{'the same folder as' if same else 'nested with'} variants[{j}] ({other.path}); "
                    "give one of them a path:"
                )


def _with_gates(variants: list[Variant], items: list[dict], path: Path, lines: dict[int, int]) -> list[Variant]:
    """Each quantized variant's reference: `gate.against`, else the float variant of the same EP
    (fp32 first), else any float variant. A gate without a reference is an error."""
    by_path = {v.path: v for v in variants}
    floats = [v for v in variants if v.options.precision in FLOAT_DTYPES]
    out = []
    for i, (variant, item) in enumerate(zip(variants, items, strict=True)):
        gate = item.get("gate")
        where = f"{path}:{lines[i]}: variants[{i}].gate"
        against = (gate or {}).get("against")
        if against is not None and (against not in by_path or against == variant.path):
            raise InputError(f"{where}: against '{against}' is not another variant's path ({', '.join(by_path)})")
        if against is None and variant.options.precision not in FLOAT_DTYPES:
            same_ep = sorted(
                (v for v in floats if v.options.ep == variant.options.ep), key=lambda v: v.options.precision != "fp32"
            )
            against = next(iter(same_ep or floats), None)
            against = against.path if against is not None else None
        if gate is not None and against is None:
            raise InputError(f"{where}: no float variant to compare against; add one or set gate.against")
        out.append(
            replace(
                variant,
                gate=Gate(float(gate["max_ppl_increase"])) if gate is not None else None,
                reference=against,
            )
        )
    return out


def _check_eval_ranges(evaluation: EvalSpec) -> None:
    """What the eval section can get wrong without the model: before anything is fetched. The
    window's upper bound (each variant's max_length) is checked once the config is at hand."""
    window, stride, max_tokens, where = evaluation.window, evaluation.stride, evaluation.max_tokens, evaluation.where
    if window is not None and window < 2:
        raise InputError(f"{where}.window must be at least 2, got {window}")
    if stride is not None and (stride < 1 or (window is not None and stride >= window)):
        upper = f" and the window less one ({window - 1})" if window is not None else ""
        raise InputError(f"{where}.stride must be at least 1{upper}, got {stride}")
    if max_tokens is not None and max_tokens < 2:
        raise InputError(f"{where}.max_tokens must be at least 2, got {max_tokens}")


def _key_line(node: yaml.Node, name: str) -> int:
    """1-based line of a top-level key (1 when absent)."""
    for key, _ in node.value if isinstance(node, yaml.MappingNode) else []:
        if key.value == name:
            return key.start_mark.line + 1
    return 1


def _variant_lines(node: yaml.Node) -> dict[int, int]:
    """1-based line of each variant item (-1: the `variants` key itself)."""
    for key, value in node.value if isinstance(node, yaml.MappingNode) else []:
        if key.value == "variants":
            lines = {-1: key.start_mark.line + 1}
            if isinstance(value, yaml.SequenceNode):
                lines.update({i: item.start_mark.line + 1 for i, item in enumerate(value.value)})
            return lines
    return {}
