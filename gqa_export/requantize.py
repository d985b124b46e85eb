"""`gqa-export quantize`: int4/int8 from a float package this tool wrote.

The package's graphs are loaded with their weights memory-mapped; every linear layer becomes
MatMulNBits exactly as in `build` (same quantize stage), streaming rows out of the mapped data
file, and the result is written atomically like any package. The input package is the float
reference for `--report`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx_ir as ir

from gqa_export.check.reader import load_package
from gqa_export.choices import ACTIVATIONS
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph.params import WIDER_THAN_IO_META
from gqa_export.jsonio import read_json, read_json_object, write_json
from gqa_export.package.manifest import DIGEST_KEY, created_at
from gqa_export.package.staging import StagedPackage, check_output, check_outside
from gqa_export.progress import NullReporter, Reporter
from gqa_export.quant.quantize import (
    FLOAT_DTYPES,
    INT_BITS,
    QuantizeReport,
    QuantOptions,
    plan_precision,
)
from gqa_export.quant.report import build_report, quantization_manifest
from gqa_export.runtime.logit_error import logit_error
from gqa_export.runtime.run import GenerationResult
from gqa_export.stages.finish import seal_lint_smoke, stream_weights
from gqa_export.stages.graphs import apply_precision

COPIED = ("genai_config.json",)


@dataclass(frozen=True)
class RequantizeResult:
    output: Path
    precision: str
    files: dict[str, int]
    report: dict[str, Any] | None
    smoke: GenerationResult | None
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)  # the new package's, as sealed
    seconds: float = 0.0


def requantize(
    package: Path,
    output: Path,
    precision: str,
    quant: QuantOptions,
    overwrite: bool = False,
    report: bool = False,
    smoke: bool = True,
    reporter: Reporter | None = None,
) -> RequantizeResult:
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    manifest = _manifest(package)
    options = manifest.get("options", {})
    ep, source_precision = options.get("ep", "cpu"), options.get("precision")
    if source_precision not in FLOAT_DTYPES:
        raise InputError(f"{package} is already {source_precision}; quantize a float (fp32/fp16) package")
    if precision not in INT_BITS:
        raise InputError(f"gqa-export quantize makes int4/int8 packages; for {precision} re-run build")
    plan_precision(ep, precision, replace(quant, activations=None))  # the pair and options, as build checks them
    activations = _activations(package, ep, precision, source_precision, quant)
    plan = plan_precision(ep, precision, replace(quant, activations=activations))
    check_output(output, overwrite, [(package, "input package")], reporter.note)
    check_outside(output, package, "input package")
    pkg = load_package(package)
    if pkg.missing_files:
        raise InputError(f"{package} lacks {', '.join(pkg.missing_files)}, named in its genai_config.json")
    for graph in pkg.graphs:
        if graph.external_problems:
            raise InputError(f"{package}: {graph.external_problems[0]}")
    if ((pkg.config or {}).get("model") or {}).get("draft"):
        raise InputError(
            f"{package} carries a draft model (speculative decoding): re-run build --draft with --precision {precision}"
        )
    filenames = [g.filename for g in pkg.graphs]
    reporter.stage("quantize")
    models = [ir.load(package / name) for name in filenames]
    for model in models:  # float32 routers of fp16/bf16 packages stay float32 (docs/moe.md §8.3)
        _mark_wider_than_io(model, plan.io_dtype)
    quant_report = QuantizeReport(plan.name, measure_errors=report)
    if any(node.op_type == "MatMulNBits" for model in models for node in model.graph):
        raise InputError(f"{package} already holds MatMulNBits weights")
    apply_precision(models, plan, EPS[ep], quant_report)  # build's stage 4, the same bytes (stages/graphs.py)
    data_file = "model.onnx.data" if len(models) == 1 else "weights.onnx.data"
    reporter.stage("package")
    notes: list[str] = []
    with StagedPackage(output, overwrite, reporter.note) as staged:
        written = stream_weights(staged.path, list(zip(filenames, models, strict=True)), data_file, reporter)
        for item in package.iterdir():
            if (
                item.is_file()
                and not item.name.endswith((".onnx", ".data"))
                and item.name not in ("manifest.json", "quant_report.json")
            ):
                shutil.copy2(item, staged.path / item.name)
        for encoder in pkg.encoders:  # vision / embedding graphs stay float, as build writes them
            for name in (encoder.filename, f"{encoder.filename}.data"):
                if (package / name).is_file():
                    shutil.copy2(package / name, staged.path / name)
        if pkg.encoders and smoke:
            notes.append("no smoke run: a multimodal package is run with `gqa-export run PKG --image FILE`")
            reporter.note(notes[-1])
            smoke = False
        result_report = None
        if report:
            reporter.stage("accuracy report (against the input package)")
            vocab = int(read_json_object(package / "genai_config.json")["model"]["vocab_size"])
            result_report = build_report(
                quant_report, quantization_manifest(plan, quant_report), logit_error(package, staged.path, vocab)
            )
            write_json(staged.path / "quant_report.json", result_report)
        manifest["options"] = {
            **options,
            "precision": plan.name,
            "quantization": quantization_manifest(plan, quant_report),
        }
        manifest["created"] = created_at()
        manifest["quantized_from"] = {
            "package": package.resolve().name,
            "precision": source_precision,
            "manifest_digest": manifest.pop(DIGEST_KEY, None),
        }
        result_smoke = seal_lint_smoke(staged.path, manifest, written, notes, reporter, smoke)
        out = staged.commit()
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    seconds = time.perf_counter() - started
    return RequantizeResult(out, plan.name, files, result_report, result_smoke, notes, manifest, seconds)


def _activations(package: Path, ep: str, precision: str, source: str, quant: QuantOptions) -> str:
    """The package's own activation dtype (its float precision): quantize replaces weights only, so
    an int4/int8 package from an fp16 one runs fp16 activations, as `build --activations fp16` does.
    Another dtype, or one the EP has no int4/int8 kernels for, is refused naming what works."""
    if quant.activations is not None and quant.activations != source:
        raise InputError(
            f"--activations {quant.activations}: quantize keeps {package}'s {source} activations (it replaces the "
            f"weights only); drop --activations, quantize an {quant.activations} package, or build --precision "
            f"{precision} --activations {quant.activations} from the checkpoint"
        )
    offered = ACTIVATIONS[ep]
    if source not in offered:
        raise InputError(
            f"{precision} on --ep {ep} runs {' or '.join(offered)} activations but {package} is {source}; quantize "
            f"an {offered[0]} package of the model (build --ep {ep} --precision {offered[0]}), or build --precision "
            f"{precision} from the checkpoint"
        )
    return source


def _manifest(package: Path) -> dict[str, Any]:
    manifest = read_json(package / "manifest.json")
    if manifest is None:
        raise InputError(f"{package} has no readable manifest.json: quantize works on packages gqa-export wrote")
    if manifest.get("tool", {}).get("name") != "gqa-export":
        raise InputError(f"{package} was not written by gqa-export; re-export it with gqa-export build")
    return manifest


def _mark_wider_than_io(model: ir.Model, io_dtype: ir.DataType) -> None:
    """A float32 initializer in a narrower package was written so on purpose (a router HF computes
    in fp32, docs/moe.md §8.3): the in-memory mark build put on it is not saved, so set it again."""
    if io_dtype == ir.DataType.FLOAT:
        return
    for value in model.graph.initializers.values():
        if value.const_value is not None and value.const_value.dtype == ir.DataType.FLOAT:
            value.meta[WIDER_THAN_IO_META] = True
