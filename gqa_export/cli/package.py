"""`inspect`, `run` and `recipes`: commands that read a package or the recipes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gqa_export.cli.app import Ep, app, command, err, fail, load_libraries, out, value
from gqa_export.cli.helptext import Command, Group
from gqa_export.errors import GqaExportError, InputError
from gqa_export.jsonio import read_json


@command(
    "inspect", epilog="Examples:\n\n  gqa-export inspect out\n\n  gqa-export inspect out --source ./my-llama --json"
)
def inspect_command(
    path: Annotated[
        Path,
        typer.Argument(metavar="PACKAGE", help="Package folder, genai_config.json, a bare .onnx or a .gguf file."),
    ],
    source: Annotated[
        Optional[Path],
        typer.Option("--source", metavar="DIR", help="HF model folder to cross-check (config, generation_config)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: summary, layers, findings.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")] = False,
) -> None:
    """Describe a package (I/O, attention per layer, KV layout) and lint it. Exit 1 on errors. A
    .gguf file: its architecture, tensor types and what a build would export them to."""
    from gqa_export.check.report import inspect_package

    if path.is_file() and path.suffix.lower() == ".gguf":  # docs/gguf.md §7
        from gqa_export.cli.render import gguf_report
        from gqa_export.source.gguf.summary import summarize

        summary = summarize(path)
        print(json.dumps(summary)) if as_json else gguf_report(out, summary)
        return

    report = inspect_package(path, source)
    if as_json:
        print(json.dumps(report))
    else:
        from gqa_export.cli.render import inspect_report

        inspect_report(out, report)
    failing = {"error", "warning"} if strict else {"error"}
    if any(f["severity"] in failing for f in report["findings"]):
        raise typer.Exit(code=1)


@command(
    "run",
    epilog='Examples:\n\n  gqa-export run out --prompt "Hello"\n\n'
    '  echo "Hi" | gqa-export run out --prompt - --chat --json',
)
def run_command(
    path: Annotated[Path, typer.Argument(metavar="PACKAGE", help="Package folder.")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Prompt text, or - to read stdin.")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Tokens to generate at most.")] = 128,
    ep: Annotated[Ep, typer.Option("--ep", help="Execution provider to run on.")] = Ep.cpu,  # type: ignore[attr-defined]
    temperature: Annotated[Optional[float], typer.Option("--temperature", help="Sample with this temperature.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", help="Nucleus sampling.")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Top-k sampling.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed for sampling.")] = None,
    chat: Annotated[bool, typer.Option("--chat", help="Apply the tokenizer's chat template.")] = False,
    system: Annotated[Optional[str], typer.Option("--system", help="System message (implies --chat).")] = None,
    interactive: Annotated[bool, typer.Option("--interactive", "-i", help="Multi-turn chat on stdin.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of streaming.")] = False,
    image: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--image",
            metavar="FILE",
            help="An image for a full multimodal package (repeatable); a prompt without the model's "
            "image marker gets one per image in front.",
        ),
    ] = None,
    audio: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--audio",
            metavar="FILE",
            help="An audio clip (WAV, ...) for a full package with a speech model; a prompt without the "
            "model's audio marker gets one in front.",
        ),
    ] = None,
    adapter: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--adapter",
            metavar="FILE",
            help="A LoRA .onnx_adapter for a base built with --lora-targets (repeatable: all active "
            "together; they must touch different modules).",
        ),
    ] = None,
    ngram: Annotated[
        Optional[int],
        typer.Option(
            "--ngram",
            metavar="N",
            help="Prompt-lookup (n-gram) speculative decoding with N-token keys (2-16); needs full logits and "
            "a package without a draft model (docs/speculative.md).",
        ),
    ] = None,
    draft_tokens: Annotated[
        Optional[int], typer.Option("--draft-tokens", help="With --ngram: tokens drafted per round (1-16, default 4).")
    ] = None,
    min_adaptive_k: Annotated[
        Optional[int],
        typer.Option("--min-adaptive-k", help="With --ngram: the floor adaptive k may fall to (0-draft tokens)."),
    ] = None,
    cooldown: Annotated[
        bool, typer.Option("--cooldown", help="With --ngram: plain steps for a while after rejected rounds.")
    ] = False,
) -> None:
    """Generate from a package with onnxruntime-genai, streaming text as it comes."""
    from gqa_export.package.paths import package_folder
    from gqa_export.runtime.chat import Session

    if not interactive and prompt is None:
        raise fail(GqaExportError("pass --prompt TEXT (or --prompt - to read stdin), or --interactive"))
    if interactive and (prompt is not None or as_json):  # never silently ignored
        given = " and ".join(f for f, on in (("--prompt", prompt is not None), ("--json", as_json)) if on)
        raise InputError(f"--interactive reads each turn from stdin and streams the replies: drop {given}")
    _check_generation(max_new_tokens, temperature, top_p, top_k, seed)
    path = package_folder(path)  # the folder, or its genai_config.json
    text = sys.stdin.read() if prompt == "-" else prompt
    if text is not None:
        from gqa_export.runtime.images import check_unexported_markers

        check_unexported_markers(path, text)
    from gqa_export.package.draft import ngram_options

    speculative = ngram_options(ngram, path, (draft_tokens, min_adaptive_k, cooldown))
    if image or audio:
        flags = " / ".join(f for f, given in (("--image", image), ("--audio", audio)) if given)
        if adapter or speculative:
            raise InputError(f"--adapter and --ngram run text packages; drop {flags}")
        if interactive or chat or system is not None:
            raise InputError(f"{flags} runs one plain prompt: drop --interactive / --chat / --system")
        assert text is not None
        sampling = (temperature, top_p, top_k, seed)
        _run_with_media(path, str(value(ep)), text, image or [], audio or [], max_new_tokens, sampling, as_json)
        return
    session = Session(
        path,
        str(value(ep)),
        max_new_tokens,
        (temperature, top_p, top_k, seed),
        chat or system is not None or interactive,
        system,
        tuple(adapter or ()),
        speculative,
    )
    _check_top_k(top_k, path)
    if interactive:
        session.interactive(sys.stdin, lambda piece: out.print(piece, end="", markup=False, highlight=False), err)
        return
    assert text is not None
    result = session.turn(text, None if as_json else (lambda piece: print(piece, end="", flush=True)))
    if as_json:
        print(json.dumps(session.result_json(result)))
        return
    print()
    if result.note:  # fewer new tokens than asked, or turns dropped: never silently
        err.print(f"[yellow]note:[/] {escape(result.note)}", highlight=False)
    err.print(
        f"[dim]{result.prompt_tokens} prompt tokens, {len(result.tokens)} new tokens, "
        f"prefill {result.prefill_ms:.1f} ms, {result.decode_tokens_per_s:.1f} tok/s[/]"
    )
    if result.speculative:
        stats = result.speculative
        err.print(
            f"[dim]speculative: {stats['draft_tokens_accepted']} of {stats['draft_tokens_proposed']} drafted tokens "
            f"accepted, {stats['target_forward_passes']} target runs[/]"
        )


@command(
    "adapter",
    epilog="Example:\n\n  gqa-export build ./my-llama -o base --lora-targets q_proj,v_proj,o_proj,down_proj\n\n"
    "  gqa-export adapter ./my-peft-adapter --base base -o mine.onnx_adapter\n\n"
    '  gqa-export run base --adapter mine.onnx_adapter --prompt "Hello"',
)
def adapter_command(
    peft_dir: Annotated[
        Path, typer.Argument(metavar="PEFT_DIR", help="PEFT LoRA folder (adapter_config.json + safetensors).")
    ],
    base: Annotated[Path, typer.Option("--base", metavar="PACKAGE", help="Package built with --lora-targets.")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="FILE", help="The .onnx_adapter to write.")],
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace FILE when it is an .onnx_adapter gqa-export wrote (sealed); any other file is refused.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Convert a PEFT LoRA adapter into an .onnx_adapter for a multi-LoRA base (docs/lora.md)."""
    from gqa_export.package.adapters import convert_adapter

    result = convert_adapter(peft_dir, base, output, overwrite)
    for done in result.cleaned:
        err.print(f"[yellow]note:[/] {escape(done)}", highlight=False)
    ranks = sorted(set(result.ranks.values()))
    scales = sorted(set(result.scaling.values()))
    if as_json:
        print(json.dumps({"output": str(result.output), "modules": result.modules, "ranks": result.ranks,
                          "scaling": result.scaling, "dtype": result.dtype}))  # fmt: skip
        return
    out.print(
        f"{escape(str(result.output))}: {len(result.modules)} modules, rank {'/'.join(map(str, ranks))}, "
        f"scaling {'/'.join(f'{s:g}' for s in scales)} folded into lora_B, {result.dtype}",
        highlight=False,
    )


def _run_with_media(
    path: Path,
    ep: str,
    text: str,
    images: list[Path],
    audios: list[Path],
    max_new_tokens: int,
    sampling: tuple,
    as_json: bool,
) -> None:
    """`run --image` / `--audio`: the prompt, images and clip through the package's multimodal processor."""
    from gqa_export.runtime.chat import Session
    from gqa_export.runtime.images import generate_with_images
    from gqa_export.runtime.run import Sampling

    stream = None if as_json else (lambda piece: print(piece, end="", flush=True))
    result = generate_with_images(path, ep, text, images, max_new_tokens, Sampling(*sampling), stream, audios)
    if as_json:
        print(json.dumps(Session.result_json(result)))
        return
    print()
    if result.note:
        err.print(f"[yellow]note:[/] {escape(result.note)}", highlight=False)
    err.print(
        f"[dim]{result.prompt_tokens} prompt tokens ({len(images)} images, {len(audios)} audio clips), "
        f"{len(result.tokens)} new tokens, "
        f"prefill {result.prefill_ms:.1f} ms, {result.decode_tokens_per_s:.1f} tok/s[/]"
    )


# onnxruntime-genai takes its random seed as a 32-bit int (-1: seeded from the clock)
MAX_SEED = 2**31 - 1


def _check_generation(
    max_new_tokens: int, temperature: float | None, top_p: float | None, top_k: int | None, seed: int | None
) -> None:
    """One line (exit 2) for a value onnxruntime-genai would take or refuse with a traceback: a
    negative temperature samples from inverted logits, a negative seed means "from the clock"."""
    problems = [
        (max_new_tokens < 1, f"--max-new-tokens must be 1 or more, got {max_new_tokens}"),
        (
            temperature is not None and not 0 < temperature < math.inf,
            f"--temperature must be above 0, got {temperature}",
        ),
        (top_p is not None and not 0 < top_p <= 1, f"--top-p must be above 0 and at most 1, got {top_p}"),
        (top_k is not None and top_k < 1, f"--top-k must be 1 or more, got {top_k}"),
        (seed is not None and not 0 <= seed <= MAX_SEED, f"--seed must be from 0 to {MAX_SEED}, got {seed}"),
    ]
    for bad, message in problems:
        if bad:
            raise InputError(message)


def _check_top_k(top_k: int | None, package: Path) -> None:
    """--top-k above the package's vocabulary: onnxruntime-genai raises when the generator starts."""
    config = read_json(package / "genai_config.json") or {}
    vocab = (config.get("model") or {}).get("vocab_size")
    if top_k is not None and isinstance(vocab, int) and top_k > vocab:
        raise InputError(f"--top-k must be at most the vocabulary size {vocab} of {package}, got {top_k}")


recipes_app = typer.Typer(
    cls=Group,
    help="List the built-in recipes or show one.",
    invoke_without_command=True,
    epilog=(
        "Examples:\n\n  gqa-export recipes --json\n\n  gqa-export recipes --coverage\n\n"
        "  gqa-export recipes show gemma3 > my-gemma3.yaml"
    ),
)
app.add_typer(recipes_app, name="recipes")


@recipes_app.callback()
def recipes_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the recipes as JSON.")] = False,
    coverage: Annotated[
        bool,
        typer.Option(
            "--coverage",
            help="Every model type the installed transformers maps to a causal LM or an image-text-to-text model: "
            "exported (recipe, attention modes, precisions), refused (why) or not applicable.",
        ),
    ] = False,
) -> None:
    """Table of recipes: name, model types, default attention, EPs and default precisions."""
    load_libraries(())  # the sub-app's commands are not wrapped by `command`: the collector back on
    if ctx.invoked_subcommand is not None:
        return
    if coverage:
        _print_coverage(as_json)
        return
    from gqa_export.recipes import builtin_recipes

    recipes = builtin_recipes()
    if as_json:
        print(json.dumps([r.as_dict() for r in recipes]))
        return
    table = Table("name", "model types", "attention", "EPs (default precision)")
    for r in recipes:
        eps = ", ".join(f"{ep} ({prec})" for ep, prec in r.default_precision.items())
        table.add_row(r.name, ", ".join(r.model_types), r.attention.mode, eps)
    out.print(table)


def _print_coverage(as_json: bool) -> None:
    from gqa_export.arch.coverage import coverage, table_rows

    rows = coverage()
    if as_json:
        print(json.dumps([row.as_dict() for row in rows]))
        return
    table = Table("model type", "status", "recipe", "attention modes", "precisions", "package / reason")
    for cells in table_rows(rows):
        table.add_row(*(escape(cell) for cell in cells))  # reasons quote [a | b] forms: not rich markup
    out.print(table)


@recipes_app.command("show", cls=Command, epilog="Example:\n\n  gqa-export recipes show llama --json")
def recipes_show(
    name: Annotated[str, typer.Argument(help="Recipe name (see `gqa-export recipes`).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of YAML.")] = False,
) -> None:
    """Print one recipe with every default resolved."""
    import yaml

    from gqa_export.recipes import find_recipe

    try:
        data = find_recipe(name).as_dict()
    except GqaExportError as exc:
        raise fail(exc) from None  # a sub-app command: not wrapped by `command`
    print(
        json.dumps(data, indent=2) if as_json else yaml.safe_dump(data, sort_keys=False),
        end="" if not as_json else "\n",
    )
