"""Declarative architecture specs: dimensions come from the HF config, tensor names are data.

Like llama.cpp's converter, a family is one registry entry: where its weights live and which
graph features it uses. The graph builder reads only these specs, never a family name.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LayerNames:
    """Module names inside one decoder layer (relative to `ArchSpec.layer_prefix`).

    Linear modules are given without the `.weight` / `.bias` suffix.
    """

    input_norm: str = "input_layernorm"
    post_attention_norm: str = "post_attention_layernorm"
    q: str = "self_attn.q_proj"
    k: str = "self_attn.k_proj"
    v: str = "self_attn.v_proj"
    o: str = "self_attn.o_proj"
    gate: str = "mlp.gate_proj"
    up: str = "mlp.up_proj"
    down: str = "mlp.down_proj"


@dataclass(frozen=True)
class ArchSpec:
    """What the graph builder needs to know about a family beyond its HF config."""

    name: str
    embed: str = "model.embed_tokens.weight"
    final_norm: str = "model.norm.weight"
    lm_head: str = "lm_head.weight"
    layer_prefix: str = "model.layers.{i}."
    layer: LayerNames = field(default_factory=LayerNames)
    activations: tuple[str, ...] = ("silu",)
    rope_types: tuple[str, ...] = ("default", "linear", "llama3")

    def layer_tensor(self, i: int, module: str, suffix: str = "weight") -> str:
        return f"{self.layer_prefix.format(i=i)}{module}.{suffix}"
