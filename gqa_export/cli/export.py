"""`build`, `fetch` and `quantize`: commands that write or fetch a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gqa_export.cli.app import EXPORT_LIBRARIES, OUTPUT, RichReporter, command, out, quiet_hub
from gqa_export.cli.options import declared
from gqa_export.cli.render import print_build

BUILD_EXAMPLES = """Examples:

  gqa-export build Qwen/Qwen3-0.6B -o qwen3-cpu-int4 -p int4

  gqa-export build ./my-llama -o out --ep cuda -p fp16 --attention gqa --json

  gqa-export build google/gemma-3-1b-it -o g3 --set attention.packed_qkv=false --overwrite
"""


@command(epilog=BUILD_EXAMPLES, libraries=EXPORT_LIBRARIES)
@declared("build")
def build(
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="Hugging Face Hub id, local model folder or .gguf file.")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="DIR", help="Package folder to create.", rich_help_panel=OUTPUT)
    ],
    values: dict[str, Any],
) -> None:
    """Export MODEL to an ONNX Runtime GenAI package in OUTPUT."""
    from gqa_export.pipeline import BuildOptions
    from gqa_export.pipeline import build as run_build
    from gqa_export.request.values import with_values

    opts = with_values(BuildOptions(model, output), values)
    quiet_hub(values["quiet"])
    if opts.draft is not None:
        from gqa_export.speculative import build_with_draft

        result = build_with_draft(opts, reporter=RichReporter(values["quiet"]))
    else:
        result = run_build(opts, RichReporter(values["quiet"]))
    if values["json"]:
        print(json.dumps(result.as_json()))
        return
    if not values["quiet"]:
        print_build(out, result)


@command(epilog="Example:\n\n  gqa-export build $(gqa-export fetch Qwen/Qwen3-0.6B -q) -o out")
@declared("fetch")
def fetch(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="Hugging Face Hub id.")],
    quiet: Annotated[
        bool, typer.Option("-q", "--quiet", help="Print only the folder.", rich_help_panel=OUTPUT)
    ] = False,
    values: dict[str, Any] | None = None,
) -> None:
    """Download (or find in the HF cache) only the files an export needs; print the folder (with
    --gguf-file: that GGUF file, checked, with the repository's config and tokenizer beside it)."""
    from gqa_export.source.fetch import resolve_source

    values = values or {}
    quiet_hub(quiet)
    source = resolve_source(model, values["revision"], RichReporter(quiet), values["gguf_file"])
    print(source.gguf.path if source.gguf is not None else source.model_dir)
