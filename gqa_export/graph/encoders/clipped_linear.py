"""Gemma-4's clipped linears, shared by its vision tower (axial_vit) and audio tower (conformer):
a bias-free Linear whose input and output are clamped by scalar bounds the checkpoint stores
beside it (`<module>.input_min` ...), when the tower's config turns them on (docs/multimodal.md
§13, §16.1)."""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.encoders.encoder_ops import matmul
from gqa_export.graph.params import Params


def clipped_linear(b: GraphBuilder, x: ir.Value, module: str, clipped: bool, params: Params) -> ir.Value:
    """The Linear stored as `<module>.linear.weight` (or `<module>.weight`), clamped on both sides
    by its stored bounds when `clipped`."""
    inner = f"{module}.linear" if f"{module}.linear.weight" in params.store else module
    if clipped:
        x = clamp(b, x, module, "input", params)
    y = matmul(b, x, f"{inner}.weight", params)
    return clamp(b, y, module, "output", params) if clipped else y


def clamp(b: GraphBuilder, x: ir.Value, module: str, side: str, params: Params) -> ir.Value:
    """x clipped to `<module>.<side>_min` / `_max`, or x where the checkpoint stores no bounds."""
    low, high = f"{module}.{side}_min", f"{module}.{side}_max"
    if low not in params.store:
        return x
    bounds = [b.initializer(n, params.computed((), lambda n=n: params.store.read(n).reshape(()))) for n in (low, high)]
    return b.op("Clip", x, *bounds)
