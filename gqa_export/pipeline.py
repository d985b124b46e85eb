"""Runs the stages: fetch -> build -> optimize -> quantize -> package -> smoke-run.

Every check that can fail on user input runs before the expensive work: EP/precision pair and
output folder before the download, recipe/architecture/shards before the graph is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gqa_export.arch import get_spec
from gqa_export.check.ep_lints import check_ep_graph, check_ep_mode
from gqa_export.check.graph_facts import graph_facts
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph.attention import gqa_refusal
from gqa_export.graph.consistency import check_against_weights, check_raw_config
from gqa_export.graph.decoder import GraphOptions, build_decoder
from gqa_export.graph.dims import ModelDims, read_dims
from gqa_export.graph.io_options import IoOptions, resolve_io, with_recipe_defaults
from gqa_export.graph.latent_attention import latent_cache_dims
from gqa_export.graph.lora import check_lora_options
from gqa_export.graph.optimize import OptimizeReport, optimize
from gqa_export.graph.params import Params
from gqa_export.graph.plan import bidirectional_ids, plan_attention, static_max_length, static_plan
from gqa_export.graph.static_decoder import build_static_decoder
from gqa_export.jsonio import write_json
from gqa_export.package.build_manifest import build_manifest, model_manifest
from gqa_export.package.finish import seal_lint_smoke, stream_weights
from gqa_export.package.genai_config import ConfigOptions, Stage, default_max_length, make_genai_config
from gqa_export.package.multimodal import (
    MultimodalPlan,
    add_config_sections,
    build_encoders,
    check_full_options,
    encoder_plan,
    full_attention_mode,
    plan_multimodal,
    processor_files,
)
from gqa_export.package.staging import (
    StagedPackage,
    check_free_space,
    check_output,
    check_outside,
    copy_tokenizer,
    shared_initializers,
)
from gqa_export.package.static_pad import apply_static_pad
from gqa_export.package.writer import external_values
from gqa_export.progress import NullReporter, Reporter
from gqa_export.quant.gguf_import import GgufReport, import_gguf
from gqa_export.quant.imported import ImportReport, import_native
from gqa_export.quant.kv_cache import KvQuantOptions, check_kv_options, quantize_kv_cache
from gqa_export.quant.qdq import to_qdq
from gqa_export.quant.quantize import (
    SUPPORTED,
    PrecisionPlan,
    QuantizeReport,
    QuantOptions,
    plan_precision,
    quantize,
)
from gqa_export.quant.report import build_report, logit_error, quantization_manifest
from gqa_export.recipes import Recipe, check_settings, load_recipe
from gqa_export.runtime.run import GenerationResult
from gqa_export.source import prequantized
from gqa_export.source.checkpoint import Checkpoint, match_builtin, open_checkpoint, text_config_of
from gqa_export.source.fetch import Source
from gqa_export.source.gguf import GgufStore
from gqa_export.source.imported import ImportedStore


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
    text_only: bool = False  # a multimodal checkpoint's text decoder alone (docs/multimodal.md §1)
    lora_targets: tuple[str, ...] = ()  # modules that get LoRA graph inputs (docs/lora.md)
    encoder_precision: str = "float"  # float | int8: a full package's vision linears (docs/multimodal.md §17)
    dequantize: bool = False  # a bitsandbytes checkpoint dequantized exactly, then --precision (docs/prequantized.md)
    gguf_file: str | None = None  # which GGUF of a folder or Hub repository (docs/gguf.md)


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
    # the manifest's options.kv_cache (dtype, scales, calibration, drift) for a quantized KV cache
    kv_cache: dict[str, Any] | None = None
    report: dict[str, Any] | None = None  # quant_report.json (--report), logits_vs_float included

    @property
    def kv_cache_json(self) -> dict[str, Any]:
        """Always an object, so a consumer reads `kv_cache.dtype` whatever the build: a float cache
        has no drift (null); a quantized one carries the manifest's entry, drift numbers included."""
        return self.kv_cache if self.kv_cache is not None else {"dtype": "float", "drift": None}

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
            "kv_cache": self.kv_cache_json,
            "files": self.files,
            "total_bytes": sum(self.files.values()),
            "seconds": round(self.seconds, 3),
            "smoke": smoke_json(self.smoke),
            "notes": self.notes,
            "report": self.report,
        }


def smoke_json(smoke: GenerationResult | None) -> dict[str, Any] | None:
    """The smoke run as `build --json` and `quantize --json` both print it (null: not run)."""
    if smoke is None:
        return None
    return {
        "ep": smoke.ep,
        "new_tokens": len(smoke.tokens),
        "prefill_ms": round(smoke.prefill_ms, 3),
        "tokens_per_s": round(smoke.decode_tokens_per_s, 2),
        "text": smoke.text,
    }


def _local_inputs(model: str | Path) -> list[tuple[Path, str]]:
    """The source folder -o must stay clear of, where it is known before the fetch."""
    local = Path(model).expanduser()
    if local.is_file():  # a GGUF: -o may sit beside it, never be or hold it
        return [(local, "GGUF file")]
    return [(local, "model folder")] if local.is_dir() else []


def build(opts: BuildOptions, reporter: Reporter | None = None, checkpoint: Checkpoint | None = None) -> BuildResult:
    """Export one package. `checkpoint`: an already opened source (a release's), else `opts.model`."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    if opts.ep not in SUPPORTED:
        raise InputError(f"unknown --ep '{opts.ep}'; choose one of {', '.join(SUPPORTED)}")
    if opts.precision is not None:
        plan_precision(opts.ep, opts.precision, opts.quant)
    check_settings(opts.settings)
    check_output(opts.output, opts.overwrite, _local_inputs(opts.model))
    user_recipe = load_recipe(opts.recipe, list(opts.settings)) if opts.recipe else None
    if checkpoint is not None:
        return _build(opts, reporter, checkpoint, user_recipe, started)
    checkpoint = open_checkpoint(opts.model, opts.revision, reporter, opts.gguf_file)
    try:
        return _build(opts, reporter, checkpoint, user_recipe, started)
    finally:
        checkpoint.close()  # what reading it wrote (a GGUF's config/tokenizer folder), success or not


def _build(
    opts: BuildOptions, reporter: Reporter, checkpoint: Checkpoint, user_recipe: Recipe | None, started: float
) -> BuildResult:
    source = checkpoint.source
    check_outside(opts.output, source.model_dir)
    prequantized.check_config(checkpoint.raw_config, source.model_dir, opts.dequantize)
    reporter.stage("build")
    if user_recipe:  # a config transformers cannot read fails before a custom recipe is used
        checkpoint.configs  # noqa: B018
    # an unknown architecture is named before transformers is asked about it
    recipe = user_recipe or match_builtin(checkpoint.raw_config, source.model_dir)
    check_raw_config(checkpoint.raw_config)
    hf_config, generation = checkpoint.configs
    text_config = text_config_of(hf_config)
    outer = hf_config if text_config is not hf_config else None
    if opts.settings and user_recipe is None:
        recipe = load_recipe(recipe.path, list(opts.settings))
    recipe = recipe.for_ep(opts.ep)
    plan = plan_precision(opts.ep, opts.precision or recipe.default_precision[opts.ep], opts.quant)
    if source.gguf is not None and opts.precision is None:  # the file's integers at the EP's speed (docs/gguf.md §5)
        plan = replace(plan, accuracy_level=EPS[opts.ep].accuracy_level)
    dims = read_dims(text_config, get_spec(recipe.arch), generation, outer)
    imported = prequantized.imported_config(checkpoint.raw_config, opts.dequantize)  # docs/prequantized.md
    store = ImportedStore(checkpoint.store, imported) if imported else checkpoint.store
    store = store.for_build(opts.dequantize) if isinstance(store, GgufStore) else store
    prequantized.check_tensors(store.names())
    spec = get_spec(recipe.arch).bind(store)
    # A stored lm_head is used as is, else the embedding is tied, as transformers loads it (a
    # stored lm_head that differs from the embedding is never tied, whatever the flag says).
    dims = replace(dims, tie_word_embeddings=spec.lm_head not in store)
    check_against_weights(dims, spec, store)
    if recipe.attention.latent_cache:  # MLA's latent as one kv head (docs/latent-attention.md)
        dims = latent_cache_dims(dims)
    max_length = planned_max_length(opts.max_length, dims)
    mm: MultimodalPlan | None = None
    # the recipe's full package is for its checkpoints with a vision tower (docs/multimodal.md §1)
    if recipe.multimodal_model_type and not opts.text_only and getattr(hf_config, "vision_config", None) is not None:
        mm = plan_multimodal(recipe.multimodal_model_type, hf_config, dims, store, source.model_dir)
    vision_weights = encoder_plan(opts.encoder_precision, opts.ep, plan.io_dtype)
    if vision_weights is not None and not mm:
        raise InputError("--encoder-precision int8 is for a full multimodal package's vision model: drop it")
    runs = get_spec(recipe.arch).bidirectional
    ids = bidirectional_ids(runs, recipe.attention.bidirectional_token_ids, hf_config, opts.bidirectional_ids)
    ids_requested = opts.bidirectional_ids is not None or bool(recipe.attention.bidirectional_token_ids)
    if recipe.attention.bias_op == "gqa" and not EPS[opts.ep].gqa_attention_bias:
        raise InputError("attention.bias_op gqa is for CPU: CUDA's GroupQueryAttention runs a bias only unfused")
    requested = opts.attention or recipe.attention.mode
    window = EPS[opts.ep].static_window
    if window:  # static shapes (QNN): its own graph pair whatever the recipe's mode (docs/eps.md §7)
        if opts.attention not in (None, "auto"):
            check_ep_mode(opts.ep, opts.attention)
        if opts.report:  # its float reference is compared over whole sequences, which windows cut up
            raise InputError("--report needs every position's logits, which a static-shape (QNN) package does not give")
        attention = static_plan(window, ids)
        max_length = static_max_length(opts.max_length, max_length, window)
    else:
        attention = plan_attention(
            full_attention_mode(requested, mm.tower) if mm else requested,
            ids,
            ids_requested,
            gqa_refusal(dims),
            bias_op=recipe.attention.bias_op,
            bias_cache=recipe.attention.bias_cache,
        )
    check_ep_mode(opts.ep, attention.mode)
    if recipe.attention.latent_cache and attention.mode != "gqa":
        raise InputError(
            f"attention.latent_cache runs in GroupQueryAttention only (mode gqa), not {attention.mode}; "
            "export with --attention gqa or without the latent cache"
        )
    io_opts, kv = with_recipe_defaults(opts.io, opts.kv, recipe.build_defaults)
    io = resolve_io(io_opts, opts.ep, attention.mode, len(attention.graphs))
    if mm:
        check_full_options(io_opts.no_lm_head, io_opts.inputs_embeds, kv.quantized, opts.report and bool(plan.nbits))
    check_kv_options(kv, opts.ep, attention.mode, plan.io_dtype.name)
    check_lora_options(opts.lora_targets, len(attention.graphs), mm is not None)
    models = []
    for graph in attention.graphs:
        graph_opts = GraphOptions(
            plan.io_dtype,
            plan.logits_dtype,
            rope_rows=max(max_length, dims.max_position_embeddings),
            logits=io.logits,
            inputs_embeds=io.inputs_embeds or mm is not None,
            embeds_with_ids=mm is not None and mm.tower.image_runs_bidirectional,
            hidden_states=io.hidden_states,
            mrope_positions=io.mrope_positions or (mm is not None and mm.tower.mrope_positions),
            layer_feature_slices=mm.feature_slices if mm else 0,
            lora_targets=opts.lora_targets,
            packed_qkv=recipe.attention.packed_qkv and EPS[opts.ep].packed_qkv,
            mode=graph.mode,
            bidirectional_ids=attention.bidirectional_ids,
            bidirectional_layers=runs.layers if runs else "all",
            bidirectional_window_bounded=runs is not None and runs.window == "bounded",
            kv_read=_kv_read(recipe.attention.bias_kv_read, opts.ep),
            fused_rope=recipe.attention.fused_rope and EPS[opts.ep].fused_rope,
            rope_switch="offset" if "If" in EPS[opts.ep].missing_ops else "if",
            # Only a single GQA graph: a split pipeline's prefill writes every position into the
            # shared buffer, so that buffer must stay max_length long for all layers.
            sliding_window_cache=recipe.attention.sliding_window_cache
            and attention.mode == "gqa"
            and len({layer.window for layer in dims.layers if layer.window > 0}) == 1,
        )
        if graph.mode == "static":
            model = build_static_decoder(dims, spec, Params(store, plan.io_dtype), graph_opts, graph.step, max_length)
        else:
            model = build_decoder(dims, spec, Params(store, plan.io_dtype), graph_opts)
        models.append(model)

    reporter.stage("optimize")
    opt_reports = [optimize(model, EPS[opts.ep].skip_norm_fusion) for model in models]
    opt_report = opt_reports[0]
    reporter.stage("quantize")
    quant_report = QuantizeReport(plan.name, measure_errors=opts.report)
    import_report, gguf_report = ImportReport(), GgufReport()
    for model in models:
        if isinstance(store, ImportedStore):  # the checkpoint's own integers first, the rest by `plan`
            import_native(model, store, plan, import_report)
        if isinstance(store, GgufStore):  # a GGUF's integer blocks likewise (docs/gguf.md §3)
            import_gguf(model, store, plan, gguf_report)
        quantize(model, plan, quant_report)
        if EPS[opts.ep].int4_format == "qdq":  # TensorRT-RTX: DequantizeLinear + MatMul (docs/eps.md §2.6)
            to_qdq(model)
    check_ep_graph(opts.ep, models)

    encoders = build_encoders(mm, dims, spec, store, plan.io_dtype, vision_weights) if mm else []
    check_ep_graph(opts.ep, [model for _, model in encoders])  # e.g. WebGPU's per-tensor limit
    reporter.stage("package")
    stages = [
        Stage(g.filename, graph_facts(m), g.run_on_prompt, g.run_on_token_gen)
        for g, m in zip(attention.graphs, models, strict=True)
    ]
    static = {"static_window": window, "num_heads": dims.num_heads}
    config = make_genai_config(
        stages,
        dims,
        ConfigOptions(
            recipe.genai_model_type, opts.ep, max_length, dims.max_position_embeddings, io.cuda_graph, **static
        ),
        generation,
    )
    if mm:
        add_config_sections(config, mm)
    notes: list[str] = [attention.reason, *(mm.tower.notes(hf_config, mm.preprocessor) if mm else [])]
    if isinstance(store, GgufStore):  # what was read from the file, and any disagreement beside it
        notes += [*(source.gguf.notes if source.gguf else ()), gguf_report.note(plan.name)]
    notes += apply_static_pad(config, dims, source.model_dir) if window else []  # docs/eps.md §7.7
    if import_report.source_format:  # what the checkpoint's quantization covered, what --precision did
        import_report.precision, import_report.by_precision = plan.name, list(quant_report.quantized)
        notes.append(import_report.note(plan.name))
    check_free_space(opts.output, sum(v.const_value.nbytes for v in external_values(models[0])))  # type: ignore[union-attr]
    with StagedPackage(opts.output, opts.overwrite, reporter.note) as staged:
        graphs = [(g.filename, m) for g, m in zip(attention.graphs, models, strict=True)]
        written = stream_weights(staged.path, graphs, attention.weights_file, reporter)
        for filename, encoder in encoders:  # each graph with its own data file
            written |= stream_weights(staged.path, [(filename, encoder)], f"{filename}.data", reporter)
        for name, processor in processor_files(mm) if mm else []:  # image (and audio) processor configs
            write_json(staged.path / name, processor)
        if len(models) > 1 and EPS[opts.ep].shared_initializers and recipe.attention.split_shared_weights:
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
        report = None
        if opts.report and plan.nbits is not None:
            reporter.stage("accuracy report (float reference export)")
            report = _float_reference_report(opts, staged.path, dims, plan, quant_report)
            write_json(staged.path / "quant_report.json", report)
        manifest = build_manifest(
            (opts.ep, opts.settings, opts.smoke), source, recipe, plan, max_length, opt_report, attention, quant_report
        )
        manifest["options"]["io"] = io.as_json()
        if import_report.source_format:  # where each weight's quantization came from
            manifest["options"]["imported_quantization"] = import_report.manifest()
        if isinstance(store, GgufStore):  # each tensor's GGML type and what it became
            manifest["options"]["gguf"] = gguf_report.manifest(store)
        manifest["options"]["kv_cache"] = kv_cache
        if opts.lora_targets:
            manifest["options"]["lora_targets"] = list(opts.lora_targets)
        if vision_weights is not None and mm:  # docs/multimodal.md §17
            manifest["options"]["encoder_precision"] = opts.encoder_precision
        speech = mm is not None and mm.audio is not None
        manifest["model"] = model_manifest(dims, text_config, spec, outer is not None, mm is not None, speech)
        if mm and (tiling := mm.tower.hf_tiling(mm.preprocessor)):  # run --image notes it (multimodal.md §14.2)
            manifest["model"]["hf_image_tiling"] = tiling
        if opts.smoke and not io.runnable:
            notes.append("no smoke run: onnxruntime-genai cannot generate from a pipeline stage on its own")
        elif opts.smoke and mm:
            notes.append("no smoke run: a multimodal package is run with `gqa-export run PKG --image FILE`")
        smoke = seal_lint_smoke(
            staged.path, manifest, written, notes, reporter, opts.smoke and io.runnable and not mm, source.model_dir
        )
        output = staged.commit()
    files = {p.name: p.stat().st_size for p in sorted(output.iterdir()) if p.is_file()}
    return BuildResult(output, source, recipe.name, attention.mode, opts.ep, plan.name, max_length, files,
                       opt_report, time.perf_counter() - started, smoke, notes, kv_cache, report)  # fmt: skip


def _float_reference_report(
    opts: BuildOptions, package: Path, dims: ModelDims, plan: PrecisionPlan, quant_report: QuantizeReport
) -> dict[str, Any]:
    """Export the same source in fp32 next to the package and compare prompt logits.

    Costs one more streamed export (bounded memory) and its disk space until it is removed."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=package, prefix=".float-reference-") as tmp:
        reference = Path(tmp) / "fp32"
        float_opts = dict(ep="cpu", precision="fp32", quant=QuantOptions(), smoke=False, report=False, overwrite=False)
        build(replace(opts, output=reference, **float_opts))
        end_to_end = logit_error(reference, package, dims.vocab_size)
    return build_report(quant_report, quantization_manifest(plan, quant_report), end_to_end)


def _kv_read(requested: str, ep: str) -> str:
    """The scatter graphs' read form: slice on CPU (its Attention computes every key it is given),
    nonpad on CUDA (flash/cuDNN need no mask; benchmarks/results/attention_modes.md)."""
    if requested != "auto":
        return requested
    return EPS[ep].standard_attention_kv_read


def planned_max_length(requested: int | None, dims: ModelDims) -> int:
    """The package's max_length: `--max-length` within the context length, else the default."""
    context = dims.max_position_embeddings
    if requested is None:
        return default_max_length(context)
    if requested < 1 or requested > context:
        raise InputError(f"--max-length must be between 1 and the model's context length {context}, got {requested}")
    return requested
