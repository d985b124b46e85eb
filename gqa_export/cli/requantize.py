"""`gqa-export quantize`: a float package re-quantized to int4/int8, streaming (quant/requantize.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from gqa_export import choices
from gqa_export.cli.app import (
    EXPORT_LIBRARIES,
    OUTPUT,
    QUANT,
    TARGET,
    AccuracyLevel,
    ActivationDtype,
    AsJson,
    Asymmetric,
    BlockSize,
    IntPrecision,
    KeepFloat,
    Method,
    MixedPrecision,
    NoSmoke,
    Overwrite,
    QuantEmbeddings,
    QuantMethod,
    Quiet,
    ReportFlag,
    RichReporter,
    command,
    out,
    value,
)
from gqa_export.cli.export import quant_options
from gqa_export.cli.render import print_summary
from gqa_export.units import size

if TYPE_CHECKING:  # the library is imported by the command that runs it
    from gqa_export.quant.requantize import RequantizeResult

# quantize keeps the input package's EP (it has no --ep): its activations are the package's own
_TWO_DTYPES = ", ".join(f"{ep} {' or '.join(d)}" for ep, d in choices.ACTIVATIONS.items() if len(d) > 1)
Activations = Annotated[
    Optional[ActivationDtype],
    typer.Option(
        "--activations",
        help="Activation dtype of the result, which must be the input package's own (quantize keeps its EP; "
        f"the default is the EP's first: {_TWO_DTYPES}).",
        rich_help_panel=QUANT,
    ),
]


@command(
    "quantize",
    libraries=EXPORT_LIBRARIES,
    epilog="Example:\n\n  gqa-export quantize llama-fp32 -o llama-int4 -p int4 --block-size 64",
)
def quantize_command(
    package: Annotated[Path, typer.Argument(metavar="PACKAGE", help="A float package written by gqa-export build.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="DIR", help="Package folder to create.", rich_help_panel=OUTPUT)
    ],
    precision: Annotated[
        IntPrecision, typer.Option("--precision", "-p", help="Target weight precision.", rich_help_panel=TARGET)
    ] = IntPrecision.int4,  # type: ignore[attr-defined]
    block_size: BlockSize = 32,
    asymmetric: Asymmetric = None,
    quant_method: QuantMethod = Method.rtn,  # type: ignore[attr-defined]
    accuracy_level: AccuracyLevel = None,
    keep_float: KeepFloat = None,
    report: ReportFlag = False,
    quant_embeddings: QuantEmbeddings = False,
    activations: Activations = None,
    mixed_precision: MixedPrecision = None,
    overwrite: Overwrite = False,
    no_smoke: NoSmoke = False,
    as_json: AsJson = False,
    quiet: Quiet = False,
) -> None:
    """Re-quantize a float package to int4/int8 (MatMulNBits), streaming."""
    from gqa_export.package.paths import package_folder
    from gqa_export.quant.requantize import requantize

    package = package_folder(package)  # the folder, or its genai_config.json
    quant = quant_options(
        block_size, asymmetric, quant_method, accuracy_level, keep_float, quant_embeddings, activations, mixed_precision
    )
    result = requantize(
        package, output, str(value(precision)), quant, overwrite, report, not no_smoke, RichReporter(quiet)
    )
    if as_json:
        print(json.dumps(_quantize_json(result, package)))
    elif not quiet:
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
    from gqa_export.package.finish import smoke_json

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
