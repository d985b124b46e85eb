"""Issue #39's classic-lineage families, each read from its modeling code in transformers 5.25 and
written as a `replace()` of the closest spec: what differs is named by what it does.

Jais-2: Nemotron's layers (LayerNorm with biases, a non-gated squared-ReLU MLP, q/k/v/o and MLP
biases) with plain LayerNorms where Nemotron's act as 1 + w, full-width RoPE.
"""

from __future__ import annotations

from dataclasses import replace

from gqa_export.arch.families import NEMOTRON

# Jais-2: LlamaModel with nn.LayerNorm(layer_norm_eps) norms and NemotronMLP (up -> relu2 -> down)
JAIS2 = replace(NEMOTRON, name="jais2", norm_offset=0.0)

CLASSIC_DERIVED = (JAIS2,)
