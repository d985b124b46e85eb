"""The release's model card (README.md with Hugging Face front matter) and license files.

The card makes `hf upload ORG/NAME ROOT .` all that is left: the Hub reads `base_model`, `license`,
`library_name: onnxruntime-genai`, `pipeline_tag` and `tags` from the front matter. The license is
carried from the source's own card (its README.md front matter: `license`, and `license_name` /
`license_link` for "other") unless the spec sets one; a release without any is refused, since
publishing weights under no stated license is never what a release engineer wants. The source's
license files (LICENSE, NOTICE, USE_POLICY.md, ...) are copied next to the card.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gqa_export import __version__
from gqa_export.errors import InputError
from gqa_export.units import size

LICENSE_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "USE_POLICY")


@dataclass(frozen=True)
class CardInfo:
    title: str
    base_model: str | None
    license: str
    license_extra: dict[str, str]  # license_name / license_link for "other" licenses
    tags: tuple[str, ...]
    repo: str | None = None  # where the release will live on the Hub


def front_matter(readme: Path) -> dict[str, Any]:
    """The YAML front matter of a model card, {} when there is none or it is not a mapping."""
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
        data = yaml.safe_load("\n".join(lines[1:end]))
    except (StopIteration, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def card_info(
    model_dir: Path, source_id: str, is_local: bool, spec_license: str | None, spec_base: str | None,
    name: str | None, extra_tags: tuple[str, ...], spec_file: Path, repo: str | None = None,
) -> CardInfo:  # fmt: skip
    source_card = front_matter(model_dir / "README.md")
    license_value = spec_license or source_card.get("license")
    if isinstance(license_value, list):
        license_value = license_value[0] if license_value else None
    if not license_value:
        raise InputError(
            f"the source has no license in its README.md front matter; set license: in {spec_file.name} "
            "(an SPDX id such as apache-2.0, or other)"
        )
    extra = {k: str(source_card[k]) for k in ("license_name", "license_link") if k in source_card and not spec_license}
    base = spec_base or (None if is_local else source_id)
    title = name or (Path(source_id).name if is_local else source_id.split("/")[-1])
    return CardInfo(title, base, str(license_value), extra, extra_tags, repo)


def license_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.iterdir() if p.is_file() and p.name.upper().startswith(LICENSE_PREFIXES))


def copy_license_files(model_dir: Path, root: Path) -> list[str]:
    copied = []
    for path in license_files(model_dir):
        shutil.copyfile(path, root / path.name)
        copied.append(path.name)
    return copied


def write_card(root: Path, info: CardInfo, variants: list[dict[str, Any]], evaluated: bool) -> None:
    """README.md: front matter, the variants table, how to run, download and verify."""
    tags = ["onnx", "onnxruntime-genai", "gqa-export", "text-generation"]
    tags += sorted({v["ep"] for v in variants}) + sorted({v["precision"] for v in variants}) + list(info.tags)
    matter: dict[str, Any] = {}
    if info.base_model:
        matter["base_model"] = info.base_model
    matter["license"] = info.license
    matter.update(info.license_extra)
    matter["library_name"] = "onnxruntime-genai"
    matter["pipeline_tag"] = "text-generation"
    matter["tags"] = list(dict.fromkeys(tags))
    header = "---\n" + yaml.safe_dump(matter, sort_keys=False, allow_unicode=True) + "---\n"
    base = f"[{info.base_model}](https://huggingface.co/{info.base_model})" if info.base_model else "the source model"
    lines = [
        f"# {info.title} for ONNX Runtime GenAI",
        "",
        f"ONNX Runtime GenAI packages of {base}, exported with gqa-export {__version__}. Each folder is a "
        "complete package (`model.onnx` + weights, `genai_config.json`, tokenizer, `manifest.json`).",
        "",
        _table(variants, evaluated),
        "",
        "## Run",
        "",
        "```python",
        "import onnxruntime_genai as og",
        "",
        f'model = og.Model("{variants[0]["path"]}")',
        "tokenizer = og.Tokenizer(model)",
        "params = og.GeneratorParams(model)",
        "params.set_search_options(max_length=256)",
        "generator = og.Generator(model, params)",
        'generator.append_tokens(tokenizer.encode("Hello"))',
        "while not generator.is_done():",
        "    generator.generate_next_token()",
        "print(tokenizer.decode(generator.get_sequence(0)))",
        "```",
        "",
        f'or `gqa-export run {variants[0]["path"]} --prompt "Hello"`.',
        "",
        "## Download one variant",
        "",
        "```",
        f'hf download {info.repo or "ORG/NAME"} --include "{variants[0]["path"]}/*" --local-dir .',
        "```",
        "",
        "## Verify",
        "",
        "`release.json` lists every file of every variant with its sha256; "
        "`gqa-export verify .` checks them (and `--smoke` runs each package).",
        "",
        "## License",
        "",
        f"The weights keep the base model's license: `{info.license}`"
        + (f" ({info.license_extra['license_name']})" if "license_name" in info.license_extra else "")
        + ".",
        "",
    ]
    (root / "README.md").write_text(header + "\n" + "\n".join(lines))


def _table(variants: list[dict[str, Any]], evaluated: bool) -> str:
    head = ["folder", "EP", "precision", "attention", "max length", "size"]
    if evaluated:
        head += ["perplexity", "vs float"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in variants:
        cells = [f"`{v['path']}`", v["ep"], v["precision"], v["attention"], str(v["max_length"]), size(v["bytes"])]
        if evaluated:
            e = v.get("eval") or {}
            cells.append(f"{e['perplexity']:.4g}" if "perplexity" in e else "not run")
            delta = e.get("perplexity_increase_pct")
            cells.append(f"{delta:+.2f}%" if delta is not None else "")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
