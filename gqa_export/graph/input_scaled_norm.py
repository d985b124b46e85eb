"""A norm that scales before it normalizes (Muse-Spark's MuseSparkTextInputScaledRMSNorm: its
post-feedforward norm, ArchSpec.post_norm_kinds "input_scaled", and the norm on each expert's output,
MoeSpec.expert_norm_form "shared_input_scaled").

y = rms(x * (offset + w)), rms(z) = z / sqrt(mean(z^2) + eps): the stored weight w (centered at offset, 1
for Muse-Spark as its other norms) multiplies the input, and a weightless RMSNorm over the last axis
follows, in fp32 inside (stash_type=1). Not the usual RMSNorm rms(x) * (offset + w): the scale changes the
mean square the norm divides by, so the two differ on any weight that is not one value on every channel.
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import Params
from gqa_export.graph.weightless_rms import weightless_rms


def input_scaled_norm(
    b: GraphBuilder, x: ir.Value, weight_name: str, params: Params, eps: float, offset: float, name: str, width: int
) -> ir.Value:
    """rms(x * (offset + w)) over the last axis (`width` wide) of x."""
    scale = b.initializer(weight_name, params.vector([weight_name], offset=offset))
    scaled = b.op("Mul", x, scale, name=f"{name}_input_scale")
    return weightless_rms(b, scaled, width, params.dtype, eps, name)
