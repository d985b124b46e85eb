"""`build`, `fetch` and `quantize`: commands that write or fetch a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gqa_export import choices
from gqa_export.choices import KV_CACHE_DTYPES, KV_SCALES
from gqa_export.cli.app import (
    ATTENTION,
    EXPORT_LIBRARIES,
    OUTPUT,
    PIPELINE,
    RECIPE,
    TARGET,
    AccuracyLevel,
    ActivationDtype,
    Activations,
    AsJson,
    Asymmetric,
    Attention,
    BlockSize,
    Dequantize,
    Ep,
    EpOption,
    GgufFile,
    KeepFloat,
    KvCache,
    KvScales,
    Method,
    MixedPrecision,
    NoSmoke,
    Overwrite,
    Precision,
    QuantEmbeddings,
    QuantMethod,
    Quiet,
    ReportFlag,
    RichReporter,
    command,
    out,
    quiet_hub,
    value,
)
from gqa_export.cli.render import print_build
from gqa_export.errors import InputError

if TYPE_CHECKING:  # the library (onnx, onnx-ir, numpy) is imported by the commands that run it
    from gqa_export.quant.quantize import QuantOptions

BUILD_EXAMPLES = """Examples:

  gqa-export build Qwen/Qwen3-0.6B -o qwen3-cpu-int4 -p int4

  gqa-export build ./my-llama -o out --ep cuda -p fp16 --attention gqa --json

  gqa-export build google/gemma-3-1b-it -o g3 --set attention.packed_qkv=false --overwrite
"""


@command(epilog=BUILD_EXAMPLES, libraries=EXPORT_LIBRARIES)
def build(
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="Hugging Face Hub id, local model folder or .gguf file.")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="DIR", help="Package folder to create.", rich_help_panel=OUTPUT)
    ],
    ep: EpOption = Ep.cpu,  # type: ignore[attr-defined]
    precision: Annotated[
        Optional[Precision],
        typer.Option("--precision", "-p", help=choices.precision_help(), rich_help_panel=TARGET),
    ] = None,
    revision: Annotated[
        Optional[str],
        typer.Option("--revision", metavar="REV", help="Hub branch, tag or commit.", rich_help_panel=TARGET),
    ] = None,
    max_length: Annotated[
        Optional[int],
        typer.Option(
            "--max-length",
            help="search.max_length: KV buffer size (default min(context, 4096)).",
            rich_help_panel=TARGET,
        ),
    ] = None,
    attention: Annotated[
        Optional[Attention],
        typer.Option(
            "--attention",
            help=choices.described(choices.ATTENTION_MODES) + ". Default: the recipe's.",
            rich_help_panel=ATTENTION,
        ),
    ] = None,
    bidirectional: Annotated[
        Optional[str],
        typer.Option(
            "--bidirectional-token-ids",
            metavar="ID,ID",
            help="Comma-separated ids whose prompt runs attend bidirectionally.",
            rich_help_panel=ATTENTION,
        ),
    ] = None,
    recipe: Annotated[
        Optional[Path],
        typer.Option(
            "--recipe",
            metavar="FILE",
            help="Use this recipe YAML instead of the built-in match.",
            rich_help_panel=RECIPE,
        ),
    ] = None,
    settings: Annotated[
        Optional[list[str]],
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Override one recipe key, e.g. --set attention.packed_qkv=false.",
            rich_help_panel=RECIPE,
        ),
    ] = None,
    block_size: BlockSize = 32,
    asymmetric: Asymmetric = None,
    quant_method: QuantMethod = Method.rtn,  # type: ignore[attr-defined]
    accuracy_level: AccuracyLevel = None,
    keep_float: KeepFloat = None,
    report: ReportFlag = False,
    quant_embeddings: QuantEmbeddings = False,
    activations: Activations = None,
    mixed_precision: MixedPrecision = None,
    dequantize: Dequantize = False,
    gguf_file: GgufFile = None,
    prune_lm_head: Annotated[
        Optional[bool],
        typer.Option(
            "--prune-lm-head/--no-prune-lm-head",
            help="Prompt logits for the last token only ([B,1,V]): the prompt pass skips the lm_head "
            "elsewhere. Default: off, every prompt position's logits (og.Engine and speculative decoding "
            "need them); prune only packages served through the Generator alone.",
            rich_help_panel=PIPELINE,
        ),
    ] = None,
    inputs_embeds: Annotated[
        bool,
        typer.Option(
            "--inputs-embeds",
            help="Take `inputs_embeds` [B,S,H] instead of input_ids (no embedding in the "
            "graph), as a multimodal pipeline feeds it.",
            rich_help_panel=PIPELINE,
        ),
    ] = False,
    hidden_states: Annotated[
        bool,
        typer.Option(
            "--hidden-states", help="Also output `hidden_states` (the final norm's output).", rich_help_panel=PIPELINE
        ),
    ] = False,
    text_only: Annotated[
        bool,
        typer.Option(
            "--text-only",
            help="For a multimodal checkpoint: the text decoder alone (default: vision and embedding "
            "models, the decoder and processor_config.json, docs/multimodal.md).",
            rich_help_panel=PIPELINE,
        ),
    ] = False,
    encoder_precision: Annotated[
        str,
        typer.Option(
            "--encoder-precision",
            metavar="float|int8",
            help="A full multimodal package's vision model: float (default, exact) or int8 (8-bit "
            "MatMulNBits linears: features move by about 1 %, docs/multimodal.md §17).",
            rich_help_panel=PIPELINE,
        ),
    ] = "float",
    no_lm_head: Annotated[
        bool,
        typer.Option(
            "--no-lm-head",
            help="Output `hidden_states` instead of logits (embedding use). An untied lm_head "
            "and embedding are different weights and are never shared.",
            rich_help_panel=PIPELINE,
        ),
    ] = False,
    kv_cache: Annotated[
        Optional[KvCache],
        typer.Option(
            "--kv-cache",
            help="Quantized KV cache (GQA k_scale/v_scale, scales calibrated on a text; lossy, the "
            "drift is measured and recorded): "
            + choices.described(KV_CACHE_DTYPES)
            + ". Default: the recipe's, else float.",
            rich_help_panel=TARGET,
        ),
    ] = None,
    kv_scales: Annotated[
        KvScales, typer.Option("--kv-scales", help=choices.described(KV_SCALES) + ".", rich_help_panel=TARGET)
    ] = KvScales("per-channel"),
    kv_calibration: Annotated[
        Optional[Path],
        typer.Option(
            "--kv-calibration",
            metavar="FILE",
            help="Text file to calibrate KV scales on (default: a built-in text).",
            rich_help_panel=TARGET,
        ),
    ] = None,
    cuda_graph: Annotated[
        bool,
        typer.Option(
            "--cuda-graph",
            help="Turn on CUDA graph capture of decode steps (enable_cuda_graph; cuda, "
            "--attention gqa; the runtime then runs batch 1).",
            rich_help_panel=TARGET,
        ),
    ] = False,
    lora_targets: Annotated[
        Optional[str],
        typer.Option(
            "--lora-targets",
            metavar="NAME,NAME",
            help="Multi-LoRA base: these modules (e.g. q_proj,v_proj,o_proj,down_proj) take lora_A/lora_B "
            "graph inputs that `gqa-export adapter` files bind to (docs/lora.md).",
            rich_help_panel=PIPELINE,
        ),
    ] = None,
    draft: Annotated[
        Optional[str],
        typer.Option(
            "--draft",
            metavar="DRAFT_SRC",
            help="A smaller model with the same tokenizer, exported into the package as draft.onnx for "
            "speculative decoding (docs/speculative.md); full logits, batch 1.",
            rich_help_panel=PIPELINE,
        ),
    ] = None,
    draft_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--draft-tokens", help="speculative.max_draft_tokens (1-16, default 4).", rich_help_panel=PIPELINE
        ),
    ] = None,
    min_adaptive_k: Annotated[
        Optional[int],
        typer.Option("--min-adaptive-k", help="speculative.min_adaptive_k (0-draft tokens).", rich_help_panel=PIPELINE),
    ] = None,
    cooldown: Annotated[
        bool, typer.Option("--cooldown", help="speculative.cooldown: true.", rich_help_panel=PIPELINE)
    ] = False,
    overwrite: Overwrite = False,
    no_smoke: NoSmoke = False,
    as_json: AsJson = False,
    quiet: Quiet = False,
) -> None:
    """Export MODEL to an ONNX Runtime GenAI package in OUTPUT."""
    from gqa_export.graph.io_options import IoOptions
    from gqa_export.graph.lora import parse_targets
    from gqa_export.pipeline import BuildOptions
    from gqa_export.pipeline import build as run_build
    from gqa_export.quant.kv_cache import KvQuantOptions

    try:
        ids = tuple(int(t) for t in bidirectional.split(",") if t.strip()) if bidirectional is not None else None
    except ValueError:
        raise InputError(f"--bidirectional-token-ids takes comma-separated integers, got {bidirectional!r}") from None
    quant = quant_options(
        block_size, asymmetric, quant_method, accuracy_level, keep_float, quant_embeddings, activations, mixed_precision
    )
    io = IoOptions(prune_lm_head, inputs_embeds, hidden_states, no_lm_head, cuda_graph)
    kv = KvQuantOptions(value(kv_cache), str(value(kv_scales)), kv_calibration)
    opts = BuildOptions(
        model, output, str(value(ep)), value(precision), revision, max_length, overwrite, not no_smoke, recipe,
        tuple(settings or ()), value(attention), ids, quant, report, io, kv, text_only, parse_targets(lora_targets),
        encoder_precision, dequantize, gguf_file,
    )  # fmt: skip
    if (draft_tokens is not None or min_adaptive_k is not None or cooldown) and draft is None:
        raise InputError(
            "--draft-tokens/--min-adaptive-k/--cooldown tune a draft model: add --draft DRAFT_SRC, or drop them"
        )
    quiet_hub(quiet)
    if draft is not None:
        from gqa_export.package.draft import SpeculativeOptions
        from gqa_export.speculative import build_with_draft

        spec = SpeculativeOptions(4 if draft_tokens is None else draft_tokens, min_adaptive_k or 0, cooldown)
        result = build_with_draft(opts, draft, spec, RichReporter(quiet))
    else:
        result = run_build(opts, RichReporter(quiet))
    if as_json:
        print(json.dumps(result.as_json()))
        return
    if not quiet:
        print_build(out, result)


@command(epilog="Example:\n\n  gqa-export build $(gqa-export fetch Qwen/Qwen3-0.6B -q) -o out")
def fetch(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="Hugging Face Hub id.")],
    revision: Annotated[
        Optional[str], typer.Option("--revision", metavar="REV", help="Hub branch, tag or commit.")
    ] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print only the folder.")] = False,
    gguf_file: GgufFile = None,
) -> None:
    """Download (or find in the HF cache) only the files an export needs; print the folder (with
    --gguf-file: that GGUF file, checked, with the repository's config and tokenizer beside it)."""
    from gqa_export.source.fetch import resolve_source

    quiet_hub(quiet)
    source = resolve_source(model, revision, RichReporter(quiet), gguf_file)
    print(source.gguf.path if source.gguf is not None else source.model_dir)


def quant_options(
    block_size: int,
    asymmetric: bool | None,
    method: Method,
    accuracy_level: int | None,
    keep_float: list[str] | None,
    embeddings: bool,
    activations: ActivationDtype | None,
    mixed_precision: list[str] | None,
) -> QuantOptions:
    """The int4/int8 options `build` and `quantize` share, as QuantOptions."""
    from gqa_export.quant.quantize import QuantOptions

    return QuantOptions(
        block_size, asymmetric, str(value(method)), accuracy_level, tuple(keep_float or ()), embeddings,
        value(activations), tuple(mixed_precision or ()),
    )  # fmt: skip
