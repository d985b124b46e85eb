"""`gqa-export quantize`: a float package re-quantized to int4/int8, streaming (requantize.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gqa_export.cli.app import EXPORT_LIBRARIES, OUTPUT, RichReporter, command, out
from gqa_export.cli.options import declared
from gqa_export.cli.render import print_summary
from gqa_export.units import size

if TYPE_CHECKING:  # the library is imported by the command that runs it
    from gqa_export.requantize import RequantizeResult


@command(
    "quantize",
    libraries=EXPORT_LIBRARIES,
    epilog="Example:\n\n  gqa-export quantize llama-fp32 -o llama-int4 -p int4 --block-size 64",
)
@declared("quantize")
def quantize_command(
    package: Annotated[Path, typer.Argument(metavar="PACKAGE", help="A float package written by gqa-export build.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="DIR", help="Package folder to create.", rich_help_panel=OUTPUT)
    ],
    values: dict[str, Any],
) -> None:
    """Re-quantize a float package to int4/int8 (MatMulNBits), streaming."""
    from gqa_export.package.paths import package_folder
    from gqa_export.requantize import requantize
    from gqa_export.request.records import BuildOptions
    from gqa_export.request.values import with_values

    package = package_folder(package)  # the folder, or its genai_config.json
    opts = with_values(BuildOptions(str(package), output), values)
    reporter = RichReporter(values["quiet"])
    result = requantize(
        package, output, str(opts.precision), opts.quant, opts.overwrite, opts.report, opts.smoke, reporter
    )
    if values["json"]:
        print(json.dumps(_quantize_json(result, package)))
    elif not values["quiet"]:
        options = result.manifest.get("options") or {}
        kv = (options.get("kv_cache") or {}).get("dtype", "float")
        target = f"{options.get('ep', '?')} {result.precision}, KV cache {kv}, max_length {options.get('max_length')}"
        rows = [
            ("package", str(result.output)),
            ("from", str(package)),
            ("target", target),
            ("size", size(sum(result.files.values()))),
        ]
        print_summary(out, rows, result.report, result.smoke, result.seconds)


def _quantize_json(result: RequantizeResult, package: Path) -> dict[str, Any]:
    """build's keys where they mean the same (the model's source, recipe, target, files, smoke run,
    notes, report), plus `input`: the float package it was quantized from."""
    from gqa_export.stages.finish import smoke_json

    manifest = result.manifest
    options = manifest.get("options") or {}
    return {
        "output": str(result.output),
        "input": str(package),
        "source": (manifest.get("source") or {}).get("id"),
        "revision": (manifest.get("source") or {}).get("revision"),
        "recipe": (manifest.get("recipe") or {}).get("name"),
        "attention": options.get("attention"),
        "ep": options.get("ep"),
        "precision": result.precision,
        "max_length": options.get("max_length"),
        "kv_cache": options.get("kv_cache") or {"dtype": "float", "drift": None},
        "files": result.files,
        "total_bytes": sum(result.files.values()),
        "seconds": round(result.seconds, 3),
        "smoke": smoke_json(result.smoke),
        "notes": result.notes,
        "report": result.report,
    }
