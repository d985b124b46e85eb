"""Stage 5 from a BuildPlan and its graphs: the package written into a staging folder (weights
streamed, genai_config, processor configs, tokenizer, the KV-cache calibration, the accuracy
report, the manifest), sealed, linted, smoke-run and put in place at -o."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gqa_export.jsonio import write_json
from gqa_export.package.build_manifest import build_manifest, ep_form_notes, ep_forms, model_manifest
from gqa_export.package.genai_config import ConfigOptions, Stage, make_genai_config
from gqa_export.package.graph_facts import graph_facts
from gqa_export.package.multimodal import add_config_sections, processor_files
from gqa_export.package.pad_id import apply_pad_id, finite_rows
from gqa_export.package.staging import StagedPackage, check_free_space, copy_tokenizer, shared_initializers
from gqa_export.package.writer import external_values
from gqa_export.plan.records import BuildPlan
from gqa_export.progress import Reporter
from gqa_export.quant.report import build_report, quantization_manifest
from gqa_export.runtime.kv_calibration import quantize_kv_cache
from gqa_export.runtime.logit_error import logit_error
from gqa_export.source.gguf import GgufStore
from gqa_export.stages.finish import seal_lint_smoke, stream_weights
from gqa_export.stages.graphs import Graphs
from gqa_export.stages.result import BuildResult

# exports the float reference of `--report`: (the plan's request as fp32 CPU, output) -> package
FloatReference = Callable[[Path], Path]


def write_package(
    plan: BuildPlan, graphs: Graphs, reporter: Reporter, started: float, float_reference: FloatReference
) -> BuildResult:
    """Write, seal, lint and smoke-run the package of `plan`, then put it in place at -o."""
    request, ep, attention, mm, dims = plan.request, plan.ep, plan.attention, plan.multimodal, plan.dims
    reporter.stage("package")
    stages = [
        Stage(g.filename, graph_facts(m), g.run_on_prompt, g.run_on_token_gen)
        for g, m in zip(attention.graphs, graphs.models, strict=True)
    ]
    options = ConfigOptions(
        plan.recipe.genai_model_type, ep.name, plan.max_length, dims.context_length, plan.io.cuda_graph,
        static_window=ep.static_window, num_heads=dims.num_heads,
    )  # fmt: skip
    config = make_genai_config(stages, dims, options, plan.generation)
    if mm:
        add_config_sections(config, mm)
    notes: list[str] = [attention.reason, *plan.notes, *(mm.tower.notes(plan.hf_config, mm.preprocessor) if mm else [])]
    if isinstance(plan.store, GgufStore):  # what was read from the file, and any disagreement beside it
        notes += [*(plan.source.gguf.notes if plan.source.gguf else ()), graphs.gguf.note(plan.precision.name)]
    pad = apply_pad_id(config, dims, plan.source.model_dir, finite_rows(plan.store, plan.spec.tensor(plan.spec.embed)))
    notes += [pad.note] if pad.note else []  # an id prompts can hold (docs/ortgenai.md §5.4)
    forms = ep_forms(plan.precision, graphs.quantize, graphs.norms)
    notes += ep_form_notes(forms)  # forms taken for ops the EP lacks
    unblocked = graphs.quantize.unblocked_note()  # experts left float (no QMoE block divides their K)
    notes += [unblocked] if unblocked else []
    if graphs.imported.source_format:  # what the checkpoint's quantization covered, what --precision did
        graphs.imported.precision, graphs.imported.by_precision = plan.precision.name, list(graphs.quantize.quantized)
        notes.append(graphs.imported.note(plan.precision.name))
    check_free_space(request.output, sum(v.const_value.nbytes for v in external_values(graphs.models[0])))  # type: ignore[union-attr]
    with StagedPackage(request.output, request.overwrite, reporter.note) as staged:
        written = stream_weights(
            staged.path, [(g.filename, m) for g, m in zip(attention.graphs, graphs.models, strict=True)],
            attention.weights_file, reporter,
        )  # fmt: skip
        for filename, encoder in graphs.encoders:  # each graph with its own data file
            written |= stream_weights(staged.path, [(filename, encoder)], f"{filename}.data", reporter)
        for name, processor in processor_files(mm) if mm else []:  # image (and audio) processor configs
            write_json(staged.path / name, processor)
        if len(graphs.models) > 1 and ep.shared_initializers and plan.recipe.attention.split_shared_weights:
            # one GPU copy of the weights for both pipeline sessions (read from onnxruntime-genai
            # 0.18's code, not run here: no GPU); the stages have no session_options of their own
            entries = shared_initializers(staged.path, attention.graphs[0].filename)
            config["model"]["decoder"]["shared_initializers"] = entries
            notes.append(f"split: {len(entries)} weights listed in decoder.shared_initializers (one GPU copy)")
        write_json(staged.path / "genai_config.json", config)
        copy_tokenizer(plan.source.model_dir, staged.path)
        kv_cache = None
        if plan.kv.quantized:  # calibrated on the float-cache graph just written (kv_quant.py)
            reporter.stage(f"KV cache {plan.kv.dtype} (calibrate, measure drift)")
            kv_cache = quantize_kv_cache(staged.path, attention.graphs[0].filename, plan.kv, plan.max_length)
            written.pop(attention.graphs[0].filename, None)  # rewritten: hashed again by finalize
        report = None
        if request.report and plan.precision.nbits is not None:
            reporter.stage("accuracy report (float reference export)")
            report = _float_reference_report(plan, graphs, staged.path, float_reference)
            write_json(staged.path / "quant_report.json", report)
        manifest = _manifest(plan, graphs, forms, kv_cache)
        manifest["model"]["pad"] = pad.manifest()
        why = plan.io.not_runnable or (
            "a multimodal package is run with `gqa-export run PKG --image FILE`" if mm else None
        )
        if request.smoke and why:  # said on stderr too, not only in --json's notes
            notes.append(f"no smoke run: {why}")
            reporter.note(notes[-1])
        smoke = seal_lint_smoke(
            staged.path, manifest, written, notes, reporter, request.smoke and plan.io.runnable and not mm,
            plan.source.model_dir,
        )  # fmt: skip
        output = staged.commit()
    files = {p.name: p.stat().st_size for p in sorted(output.iterdir()) if p.is_file()}
    return BuildResult(output, plan.source, plan.recipe.name, attention.mode, ep.name, plan.precision.name,
                       plan.max_length, files, graphs.optimize, time.perf_counter() - started, smoke, notes, kv_cache,
                       report)  # fmt: skip


def _manifest(
    plan: BuildPlan, graphs: Graphs, forms: dict[str, Any], kv_cache: dict[str, Any] | None
) -> dict[str, Any]:
    """The manifest of the build before its files are hashed (package/build_manifest.py)."""
    request, mm = plan.request, plan.multimodal
    manifest = build_manifest(
        (plan.ep.name, request.settings, request.smoke), plan.source, plan.recipe, plan.precision, plan.max_length,
        graphs.optimize, plan.attention, graphs.quantize,
    )  # fmt: skip
    options = manifest["options"]
    options["io"] = plan.io.as_json()
    options.update({"ep_forms": forms} if forms else {})
    if graphs.imported.source_format:  # where each weight's quantization came from
        options["imported_quantization"] = graphs.imported.manifest()
    if isinstance(plan.store, GgufStore):  # each tensor's GGML type and what it became
        options["gguf"] = graphs.gguf.manifest(plan.store)
    options["kv_cache"] = kv_cache
    if request.lora_targets:
        options["lora_targets"] = list(request.lora_targets)
    if plan.vision_weights is not None and mm:  # docs/multimodal.md §17
        options["encoder_precision"] = request.encoder_precision
    speech = mm is not None and mm.audio is not None
    manifest["model"] = model_manifest(plan.dims, plan.text_config, plan.spec, plan.outer is not None, mm is not None,
                                       speech)  # fmt: skip
    if mm and (tiling := mm.tower.hf_tiling(mm.preprocessor)):  # run --image notes it (multimodal.md §14.2)
        manifest["model"]["hf_image_tiling"] = tiling
    if mm and (limit := mm.tower.position_limit(mm.vision)):  # run --image refuses past it (multimodal.md §13.4)
        manifest["model"]["vision_position_limit"] = limit
    return manifest


def _float_reference_report(
    plan: BuildPlan, graphs: Graphs, package: Path, float_reference: FloatReference
) -> dict[str, Any]:
    """Export the same source in fp32 next to the package and compare prompt logits.

    Costs one more streamed export (bounded memory) and its disk space until it is removed."""
    with tempfile.TemporaryDirectory(dir=package, prefix=".float-reference-") as tmp:
        reference = float_reference(Path(tmp) / "fp32")
        end_to_end = logit_error(reference, package, plan.dims.vocab_size)
    quant = graphs.quantize
    return build_report(quant, quantization_manifest(plan.precision, quant), end_to_end)


def float_reference_request(request: Any, output: Path) -> Any:
    """The request of the float reference: the same source and options in fp32 on CPU, no report."""
    from gqa_export.request.records import QuantOptions

    return replace(
        request, output=output, ep="cpu", precision="fp32", quant=QuantOptions(), smoke=False, report=False,
        overwrite=False,
    )  # fmt: skip
