"""What a build writes into manifest.json about itself (package/manifest.py seals it): the tool,
source, recipe and options of the build, and which parts of the checkpoint were exported."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gqa_export.arch import ArchSpec
from gqa_export.graph.optimize import OptimizeReport
from gqa_export.graph.plan import AttentionPlan
from gqa_export.model.dims import ModelDims
from gqa_export.package.manifest import created_at, environment_entry, recipe_entry, source_entry, tool_entry
from gqa_export.quant.quantize import PrecisionPlan, QuantizeReport
from gqa_export.quant.report import quantization_manifest
from gqa_export.recipes import Recipe
from gqa_export.source.fetch import Source


def build_manifest(
    build: tuple[str, tuple[str, ...], bool], source: Source, recipe: Recipe, plan: PrecisionPlan, max_length: int,
    opt_report: OptimizeReport, attention: AttentionPlan, quant_report: QuantizeReport,
) -> dict[str, Any]:  # fmt: skip
    """The manifest of a build before its files are hashed: `build` is (ep, --set settings, smoke)."""
    ep, settings, smoke = build
    return {
        "tool": tool_entry(),
        "created": created_at(),
        "source": source_entry(source),
        "recipe": recipe_entry(recipe),
        "options": {
            "ep": ep,
            "precision": plan.name,
            "quantization": quantization_manifest(plan, quant_report),
            "max_length": max_length,
            "attention": attention.mode,
            "attention_reason": attention.reason,
            "bidirectional_token_ids": list(attention.bidirectional_ids),
            "graphs": [g.filename for g in attention.graphs],
            "settings": list(settings),
            "smoke": smoke,
        },
        "optimize": asdict(opt_report),
        **environment_entry(),
    }


def model_manifest(
    dims: ModelDims, text_config: Any, spec: ArchSpec, multimodal: bool, full: bool = False, speech: bool = False
) -> dict[str, Any]:
    """What was exported: for a multimodal checkpoint, its text decoder, with the vision tower and
    embedding model when `full` (and the audio tower when `speech`)."""
    text = f"text decoder only (tensors under '{spec.prefix}', '{spec.lm_head}'); vision/audio towers not exported"
    return {
        "architecture": dims.architecture,
        "model_type": dims.model_type,
        "text_model_type": str(text_config.model_type),
        "layers": dims.num_layers,
        "kv_cache_layers": list(dims.cache_layers),
        "attention_windows": [layer.window for layer in dims.layers],  # the lints read this, not config.json
        "exported": (
            f"vision tower (vision.onnx), {'audio tower (speech.onnx), ' if speech else ''}embedding (embedding.onnx) "
            f"and text decoder (tensors under '{spec.prefix}')"
            if full
            else text
            if multimodal
            else "whole model"
        ),
    }


def ep_forms(plan: PrecisionPlan, quant_report: QuantizeReport, norms: int) -> dict[str, Any]:
    """The graph forms a build took because its EP lacks an op (docs/eps.md §2.7, §2.8), for the
    manifest's options.ep_forms and the build notes; {} when it took none (the key is then absent)."""
    forms: dict[str, Any] = {}
    if quant_report.float_gathers:
        forms["float_gather"] = {"tables": sorted(set(quant_report.float_gathers)), "why": plan.float_gather}
    if norms:
        forms["primitive_norms"] = norms
    return forms


def ep_form_notes(forms: dict[str, Any]) -> list[str]:
    notes = []
    if gather := forms.get("float_gather"):
        notes.append(
            f"{', '.join(gather['tables'])}: the embedding Gather reads the float table and the lm_head is "
            f"quantized ({gather['why']}; docs/eps.md §2.7)"
        )
    if norms := forms.get("primitive_norms"):
        notes.append(f"{norms} RMSNorms written as primitive ops (fp32 statistics; docs/eps.md §2.8)")
    return notes
