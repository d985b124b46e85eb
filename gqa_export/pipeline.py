"""Runs the stages: fetch -> build -> optimize -> quantize -> package -> smoke-run.

Every check that can fail on user input runs before the expensive work: EP/precision pair and
output folder before the download, recipe/architecture/shards before the graph is built.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gqa_export import prequantized
from gqa_export.arch import ArchSpec, get_spec
from gqa_export.errors import InputError
from gqa_export.fetch import Source, resolve_source
from gqa_export.genai_config import ConfigOptions, Stage, default_max_length, make_genai_config
from gqa_export.graph.attention import gqa_refusal
from gqa_export.graph.consistency import check_against_weights, check_raw_config
from gqa_export.graph.decoder import GraphOptions, build_decoder
from gqa_export.graph.dims import ModelDims, read_dims
from gqa_export.graph.params import Params
from gqa_export.graph.plan import AttentionPlan, bidirectional_ids, plan_attention
from gqa_export.graph_facts import graph_facts
from gqa_export.io_options import IoOptions, resolve_io, with_recipe_defaults
from gqa_export.kv_quant import KvQuantOptions, check_kv_options, quantize_kv_cache
from gqa_export.lints import check_written
from gqa_export.manifest import created_at, environment_entry, finalize, recipe_entry, source_entry, tool_entry
from gqa_export.optimize import OptimizeReport, optimize
from gqa_export.package import (
    StagedPackage,
    check_free_space,
    check_output,
    check_outside,
    copy_tokenizer,
    shared_initializers,
    write_json,
)
from gqa_export.progress import NullReporter, Reporter
from gqa_export.quant_report import build_report, logit_error, quantization_manifest
from gqa_export.quantize import (
    SUPPORTED,
    PrecisionPlan,
    QuantizeReport,
    QuantOptions,
    plan_precision,
    quantize,
)
from gqa_export.recipes import Recipe, builtin_recipes, load_recipe, match_recipe
from gqa_export.run import GenerationResult, runnable_ep, smoke_run
from gqa_export.weights import WeightStore
from gqa_export.writer import external_values, save_models


class Checkpoint:
    """A resolved checkpoint: the folder, its config.json, and (read on first use) its HF config,
    generation config and weight store. A release opens it once for all of its variants: one
    fetch, one parse, one set of memory-mapped shards whose pages every variant reuses."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.raw_config = _read_json(source.model_dir / "config.json")

    @cached_property
    def configs(self) -> tuple[Any, dict[str, Any] | None]:
        return _read_configs(self.source.model_dir)

    @cached_property
    def store(self) -> WeightStore:
        return WeightStore.open(self.source.model_dir)


def open_checkpoint(model: str, revision: str | None = None, reporter: Reporter | None = None) -> Checkpoint:
    return Checkpoint(resolve_source(model, revision, reporter))


@dataclass(frozen=True)
class BuildOptions:
    model: str
    output: Path
    ep: str = "cpu"
    precision: str | None = None  # None: the recipe's default for the EP
    revision: str | None = None
    max_length: int | None = None
    overwrite: bool = False
    smoke: bool = True
    recipe: Path | None = None
    settings: tuple[str, ...] = ()  # --set key=value recipe overrides
    attention: str | None = None  # gqa | bias | split | auto; None: the recipe's
    bidirectional_ids: tuple[int, ...] | None = None  # None: the recipe's
    quant: QuantOptions = field(default_factory=QuantOptions)  # int4/int8 only
    report: bool = False  # write quant_report.json (int4/int8)
    io: IoOptions = field(default_factory=IoOptions)  # last-token logits, pipeline I/O, CUDA graph
    kv: KvQuantOptions = field(default_factory=KvQuantOptions)  # int8/int4 KV cache


@dataclass(frozen=True)
class BuildResult:
    output: Path
    source: Source
    recipe: str
    attention_mode: str
    ep: str
    precision: str
    max_length: int
    files: dict[str, int]
    optimize: OptimizeReport
    seconds: float
    smoke: GenerationResult | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "source": self.source.source_id,
            "revision": self.source.revision,
            "recipe": self.recipe,
            "attention": self.attention_mode,
            "ep": self.ep,
            "precision": self.precision,
            "max_length": self.max_length,
            "files": self.files,
            "total_bytes": sum(self.files.values()),
            "seconds": round(self.seconds, 3),
            "smoke": None
            if self.smoke is None
            else {
                "ep": self.smoke.ep,
                "new_tokens": len(self.smoke.tokens),
                "prefill_ms": round(self.smoke.prefill_ms, 3),
                "tokens_per_s": round(self.smoke.decode_tokens_per_s, 2),
                "text": self.smoke.text,
            },
            "notes": self.notes,
        }


def _local_inputs(model: str | Path) -> list[tuple[Path, str]]:
    """The source folder -o must stay clear of, where it is known before the fetch."""
    local = Path(model).expanduser()
    return [(local, "model folder")] if local.is_dir() else []


def build(opts: BuildOptions, reporter: Reporter | None = None, checkpoint: Checkpoint | None = None) -> BuildResult:
    """Export one package. `checkpoint`: an already opened source (a release's), else `opts.model`."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    if opts.ep not in SUPPORTED:
        raise InputError(f"unknown --ep '{opts.ep}'; choose one of {', '.join(SUPPORTED)}")
    if opts.precision is not None:
        plan_precision(opts.ep, opts.precision, opts.quant)
    check_output(opts.output, opts.overwrite, _local_inputs(opts.model))
    user_recipe = load_recipe(opts.recipe, list(opts.settings)) if opts.recipe else None

    checkpoint = checkpoint or open_checkpoint(opts.model, opts.revision, reporter)
    source = checkpoint.source
    check_outside(opts.output, source.model_dir)
    prequantized.check_config(checkpoint.raw_config, source.model_dir)
    reporter.stage("build")
    if user_recipe:  # a config transformers cannot read fails before a custom recipe is used
        checkpoint.configs  # noqa: B018
    # an unknown architecture is named before transformers is asked about it
    recipe = user_recipe or _match(checkpoint.raw_config, source.model_dir)
    check_raw_config(checkpoint.raw_config)
    hf_config, generation = checkpoint.configs
    text_config = _text_config(hf_config)
    outer = hf_config if text_config is not hf_config else None
    if opts.settings and user_recipe is None:
        recipe = load_recipe(recipe.path, list(opts.settings))
    recipe = recipe.for_ep(opts.ep)
    plan = plan_precision(opts.ep, opts.precision or recipe.default_precision[opts.ep], opts.quant)
    dims = read_dims(text_config, get_spec(recipe.arch), recipe.model, generation, outer)
    store = checkpoint.store
    prequantized.check_tensors(store.names())
    spec = get_spec(recipe.arch).bind(store)
    # A stored lm_head is used as is, else the embedding is tied, as transformers loads it (a
    # stored lm_head that differs from the embedding is never tied, whatever the flag says).
    dims = replace(dims, tie_word_embeddings=spec.lm_head not in store)
    check_against_weights(dims, spec, store)
    max_length = _max_length(opts.max_length, dims)
    ids = bidirectional_ids(recipe.attention, hf_config, opts.bidirectional_ids)
    ids_requested = opts.bidirectional_ids is not None or bool(recipe.attention.bidirectional_token_ids)
    if recipe.attention.bias_op == "gqa" and opts.ep != "cpu":
        raise InputError("attention.bias_op gqa is for CPU: CUDA's GroupQueryAttention runs a bias only unfused")
    attention = plan_attention(
        opts.attention or recipe.attention.mode, ids, ids_requested, recipe.attention, gqa_refusal(dims)
    )
    io_opts, kv = with_recipe_defaults(opts.io, opts.kv, recipe.build_defaults)
    io = resolve_io(io_opts, opts.ep, attention.mode, len(attention.graphs))
    check_kv_options(kv, opts.ep, attention.mode, plan.io_dtype.name)
    models = []
    for graph in attention.graphs:
        graph_opts = GraphOptions(
            plan.io_dtype,
            plan.logits_dtype,
            rope_rows=max(max_length, dims.max_position_embeddings),
            logits=io.logits,
            inputs_embeds=io.inputs_embeds,
            hidden_states=io.hidden_states,
            packed_qkv=recipe.attention.packed_qkv,
            mode=graph.mode,
            bidirectional_ids=attention.bidirectional_ids,
            bidirectional_layers=recipe.attention.bidirectional_layers,
            bidirectional_window_bounded=recipe.attention.bidirectional_window == "bounded",
            kv_read=_kv_read(recipe.attention.bias_kv_read, opts.ep),
            fused_rope=recipe.attention.fused_rope,
            # Only a single GQA graph: a split pipeline's prefill writes every position into the
            # shared buffer, so that buffer must stay max_length long for all layers.
            sliding_window_cache=recipe.attention.sliding_window_cache
            and attention.mode == "gqa"
            and len({layer.window for layer in dims.layers if layer.window > 0}) == 1,
        )
        models.append(build_decoder(dims, spec, Params(store, plan.io_dtype), graph_opts))

    reporter.stage("optimize")
    opt_reports = [optimize(model) for model in models]
    opt_report = opt_reports[0]
    reporter.stage("quantize")
    quant_report = QuantizeReport(plan.name, measure_errors=opts.report)
    for model in models:
        quantize(model, plan, quant_report)

    reporter.stage("package")
    stages = [
        Stage(g.filename, graph_facts(m), g.run_on_prompt, g.run_on_token_gen)
        for g, m in zip(attention.graphs, models, strict=True)
    ]
    config = make_genai_config(
        stages,
        dims,
        ConfigOptions(recipe.genai_model_type, opts.ep, max_length, dims.max_position_embeddings, io.cuda_graph),
        generation,
    )
    notes: list[str] = [attention.reason]
    check_free_space(opts.output, sum(v.const_value.nbytes for v in external_values(models[0])))  # type: ignore[union-attr]
    with StagedPackage(opts.output, opts.overwrite, reporter.note) as staged:
        weights = len(external_values(models[0]))
        with reporter.task(f"streaming weights into {attention.weights_file}", weights) as advance:
            written = save_models(
                [(g.filename, m) for g, m in zip(attention.graphs, models, strict=True)],
                staged.path,
                attention.weights_file,
                lambda: advance(1),
            )
        if len(models) > 1 and opts.ep == "cuda" and recipe.attention.split_shared_weights:
            # one GPU copy of the weights for both pipeline sessions (read from onnxruntime-genai
            # 0.18's code, not run here: no GPU); the stages have no session_options of their own
            entries = shared_initializers(staged.path, attention.graphs[0].filename)
            config["model"]["decoder"]["shared_initializers"] = entries
            notes.append(f"split: {len(entries)} weights listed in decoder.shared_initializers (one GPU copy)")
        write_json(staged.path / "genai_config.json", config)
        copy_tokenizer(source.model_dir, staged.path)
        kv_cache = None
        if kv.quantized:  # calibrated on the float-cache graph just written (kv_quant.py)
            reporter.stage(f"KV cache {kv.dtype} (calibrate, measure drift)")
            kv_cache = quantize_kv_cache(staged.path, attention.graphs[0].filename, kv, max_length)
            written.pop(attention.graphs[0].filename, None)  # rewritten: hashed again by finalize
            notes.append(f"KV cache {kv.dtype} {kv.scales}: drift {kv_cache['drift']}")
        if opts.report and plan.nbits is not None:
            reporter.stage("accuracy report (float reference export)")
            report = _float_reference_report(opts, staged.path, dims, plan, quant_report)
            write_json(staged.path / "quant_report.json", report)
            notes.append(f"logits vs float: {report['logits_vs_float']}")
        manifest = _manifest(opts, source, recipe, plan, max_length, opt_report, attention, quant_report)
        manifest["options"]["io"] = io.as_json()
        manifest["options"]["kv_cache"] = kv_cache
        manifest["model"] = _model_manifest(dims, text_config, spec, outer is not None)
        finalize(staged.path, manifest, written)  # every file hashed (the report too), then the manifest
        _lint_own_package(staged.path, source.model_dir, notes, reporter)
        if opts.smoke and not io.runnable:
            notes.append("no smoke run: onnxruntime-genai cannot generate from a pipeline stage on its own")
        smoke = _smoke(staged.path, reporter, notes) if opts.smoke and io.runnable else None
        output = staged.commit()
    files = {p.name: p.stat().st_size for p in sorted(output.iterdir()) if p.is_file()}
    return BuildResult(output, source, recipe.name, attention.mode, opts.ep, plan.name, max_length, files,
                       opt_report, time.perf_counter() - started, smoke, notes)  # fmt: skip


def _float_reference_report(
    opts: BuildOptions, package: Path, dims: ModelDims, plan: PrecisionPlan, quant_report: QuantizeReport
) -> dict[str, Any]:
    """Export the same source in fp32 next to the package and compare prompt logits.

    Costs one more streamed export (bounded memory) and its disk space until it is removed."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=package, prefix=".float-reference-") as tmp:
        reference = Path(tmp) / "fp32"
        build(replace(opts, output=reference, ep="cpu", precision="fp32", smoke=False, report=False, overwrite=False))
        end_to_end = logit_error(reference, package, dims.vocab_size)
    return build_report(quant_report, quantization_manifest(plan, quant_report), end_to_end)


def _lint_own_package(folder: Path, source_dir: Path, notes: list[str], reporter: Reporter) -> None:
    """Run `inspect`'s lints on what was written; errors fail the build, warnings become notes."""
    for f in check_written(folder, source_dir):
        notes.append(f"{f.id}: {f.message}")
        reporter.note(notes[-1])


def _read_configs(model_dir: Path) -> tuple[Any, dict[str, Any] | None]:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_dir)
    except (ValueError, KeyError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot read {model_dir / 'config.json'}: {first}") from None
    gen_path = model_dir / "generation_config.json"
    return config, _read_json(gen_path) if gen_path.is_file() else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} does not hold a JSON object")
    return data


def _match(raw: dict[str, Any], model_dir: Path) -> Recipe:
    """The built-in recipe for a config.json. Multimodal checkpoints match on their text model's
    type (one recipe per decoder family) and the top-level architecture; a text_config without a
    model_type gets the one transformers fills in."""
    architecture = (raw.get("architectures") or [None])[0]
    text = raw.get("text_config")
    model_type = str(raw.get("model_type", "?"))
    if isinstance(text, dict):
        model_type = str(text.get("model_type") or _text_config(_read_configs(model_dir)[0]).model_type)
    return match_recipe(model_type, architecture, builtin_recipes())


def source_dims(model_dir: Path) -> ModelDims:
    """A local checkpoint's dimensions read exactly as `build` reads them with its built-in recipe
    (transformers' config, the family's spec): what `inspect --source` checks a package against."""
    raw = _read_json(model_dir / "config.json")
    recipe = _match(raw, model_dir)
    check_raw_config(raw)
    hf_config, generation = _read_configs(model_dir)
    text_config = _text_config(hf_config)
    outer = hf_config if text_config is not hf_config else None
    return read_dims(text_config, get_spec(recipe.arch), recipe.model, generation, outer)


def _kv_read(requested: str, ep: str) -> str:
    """The scatter graphs' read form: slice on CPU (its Attention computes every key it is given),
    nonpad on CUDA (flash/cuDNN need no mask; benchmarks/results/attention_modes.md)."""
    if requested != "auto":
        return requested
    return "nonpad" if ep == "cuda" else "slice"


def _text_config(config: Any) -> Any:
    """The text decoder's config: the config itself, or a multimodal config's text_config."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def _max_length(requested: int | None, dims: ModelDims) -> int:
    context = dims.max_position_embeddings
    if requested is None:
        return default_max_length(context)
    if requested < 1 or requested > context:
        raise InputError(f"--max-length must be between 1 and the model's context length {context}, got {requested}")
    return requested


def _smoke(folder: Path, reporter: Reporter, notes: list[str]) -> GenerationResult | None:
    ep, note = runnable_ep(folder)
    if note is not None:
        notes.append(note if ep is not None else f"{note}: smoke run skipped")
        reporter.note(notes[-1])
    if ep is None:
        return None
    reporter.stage(f"smoke-run on {ep}")
    return smoke_run(folder, ep)


def _manifest(
    opts: BuildOptions, source: Source, recipe: Recipe, plan: PrecisionPlan, max_length: int,
    opt_report: OptimizeReport, attention: AttentionPlan, quant_report: QuantizeReport,
) -> dict[str, Any]:  # fmt: skip
    return {
        "tool": tool_entry(),
        "created": created_at(),
        "source": source_entry(source),
        "recipe": recipe_entry(recipe),
        "options": {
            "ep": opts.ep,
            "precision": plan.name,
            "quantization": quantization_manifest(plan, quant_report),
            "max_length": max_length,
            "attention": attention.mode,
            "attention_reason": attention.reason,
            "bidirectional_token_ids": list(attention.bidirectional_ids),
            "graphs": [g.filename for g in attention.graphs],
            "settings": list(opts.settings),
            "smoke": opts.smoke,
        },
        "optimize": asdict(opt_report),
        **environment_entry(),
    }


def _model_manifest(dims: ModelDims, text_config: Any, spec: ArchSpec, multimodal: bool) -> dict[str, Any]:
    """What was exported: for a multimodal checkpoint, only its text decoder."""
    return {
        "architecture": dims.architecture,
        "model_type": dims.model_type,
        "text_model_type": str(text_config.model_type),
        "layers": dims.num_layers,
        "kv_cache_layers": list(dims.cache_layers),
        "attention_windows": [layer.window for layer in dims.layers],  # the lints read this, not config.json
        "exported": (
            f"text decoder only (tensors under '{spec.prefix}', '{spec.lm_head}'); vision/audio towers not exported"
            if multimodal
            else "whole model"
        ),
    }
