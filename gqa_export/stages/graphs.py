"""Stages 2-4 from a BuildPlan: the decoder graphs built, optimized and put in their precision,
and a full package's encoder graphs, each checked against the EP's ops before anything is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gqa_export.check.ep_lints import check_ep_graph
from gqa_export.eps import ExecutionProvider
from gqa_export.graph.decoder import build_decoder
from gqa_export.graph.optimize import OptimizeReport, optimize
from gqa_export.graph.params import Params
from gqa_export.graph.primitive_norms import decompose_for
from gqa_export.graph.static_decoder import build_static_decoder
from gqa_export.package.multimodal import build_encoders
from gqa_export.plan.records import BuildPlan
from gqa_export.progress import Reporter
from gqa_export.quant.gguf_import import GgufReport, import_gguf
from gqa_export.quant.imported import ImportReport, import_native
from gqa_export.quant.qdq import to_qdq
from gqa_export.quant.quantize import PrecisionPlan, QuantizeReport, quantize
from gqa_export.quant.unflatten import unflatten_matmul_nbits
from gqa_export.source.gguf import GgufStore
from gqa_export.source.imported import ImportedStore


@dataclass
class Graphs:
    """The graphs of one export, in memory with lazy weights, and what each stage reported."""

    models: list[Any]  # ir.Model per attention-plan graph
    encoders: list[tuple[str, Any]]  # (file name, ir.Model) of a full package's vision/audio/embedding graphs
    optimize: OptimizeReport
    quantize: QuantizeReport
    imported: ImportReport
    gguf: GgufReport
    norms: int = 0  # norms written as primitive ops for the EP (docs/eps.md §2.8)


def build_graphs(plan: BuildPlan, reporter: Reporter) -> Graphs:
    """Build every graph of the plan, optimize it, apply the precision plan (a pre-quantized
    checkpoint's own integers first), and refuse a graph the EP cannot run."""
    ep, precision, store = plan.ep, plan.precision, plan.store
    models = []
    for spec, options in zip(plan.attention.graphs, plan.graphs, strict=True):
        params = Params(store, precision.io_dtype)
        if spec.mode == "static":
            models.append(build_static_decoder(plan.dims, plan.spec, params, options, spec.step, plan.max_length))
        else:
            models.append(build_decoder(plan.dims, plan.spec, params, options))
    reporter.stage("optimize")
    opt_reports = [optimize(model, ep.skip_norm_fusion) for model in models]
    norms = decompose_for(ep, models)  # RMSNorm as primitive ops where the EP lacks it (docs/eps.md §2.8)
    reporter.stage("quantize")
    quant_report = QuantizeReport(precision.name, measure_errors=plan.request.report)
    import_report, gguf_report = ImportReport(), GgufReport()
    apply_precision(models, precision, ep, quant_report, store, import_report, gguf_report)
    mm = plan.multimodal
    encoders = build_encoders(mm, plan.dims, plan.spec, store, precision.io_dtype, plan.vision_weights) if mm else []
    norms += decompose_for(ep, [model for _, model in encoders])
    check_ep_graph(ep.name, [model for _, model in encoders])  # e.g. WebGPU's per-tensor limit
    return Graphs(models, encoders, opt_reports[0], quant_report, import_report, gguf_report, norms)


def apply_precision(
    models: list[Any], precision: PrecisionPlan, ep: ExecutionProvider, report: QuantizeReport,
    store: Any = None, imported: ImportReport | None = None, gguf: GgufReport | None = None,
) -> None:  # fmt: skip
    """Stage 4 on graphs in memory (`build`'s and `quantize`'s): a pre-quantized checkpoint's own
    integers first (`store` an ImportedStore), the rest by the precision plan, in the EP's int4
    form; then refuse a graph holding an op the EP cannot run."""
    for model in models:
        if isinstance(store, ImportedStore) and imported is not None:
            import_native(model, store, precision, imported)
        if isinstance(store, GgufStore) and gguf is not None:  # a GGUF's integer blocks likewise (docs/gguf.md §3)
            import_gguf(model, store, precision, gguf)
        quantize(model, precision, report)
        if ep.int4_format == "qdq":  # TensorRT-RTX: DequantizeLinear + MatMul (docs/eps.md §2.6)
            to_qdq(model)
        unflatten_matmul_nbits(model)  # a quantized tied lm_head reads [B, S, H] itself
    check_ep_graph(ep.name, models)
