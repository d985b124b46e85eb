"""Declarative architecture specs: dimensions come from the HF config, tensor names are data.

Like llama.cpp's converter, a family is one registry entry: where its weights live and how a
layer is wired (norm layout, q/k norms, fused projections). The graph builder reads only these
specs and the recipe's model options, never a family name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NORM_LAYOUTS = ("pre", "sandwich", "post")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class LayerNames:
    """Module names inside one decoder layer (relative to `ArchSpec.layer_prefix`).

    Linear modules are given without the `.weight` / `.bias` suffix. `qkv` / `gate_up` name a
    fused projection (Phi-3) used instead of q/k/v or gate/up; norms set to None do not exist.
    """

    input_norm: str | None = "input_layernorm"
    post_attention_norm: str | None = "post_attention_layernorm"
    pre_feedforward_norm: str | None = None
    post_feedforward_norm: str | None = None
    q: str = "self_attn.q_proj"
    k: str = "self_attn.k_proj"
    v: str = "self_attn.v_proj"
    o: str = "self_attn.o_proj"
    qkv: str | None = None
    q_norm: str | None = None
    k_norm: str | None = None
    gate: str = "mlp.gate_proj"
    up: str = "mlp.up_proj"
    down: str = "mlp.down_proj"
    gate_up: str | None = None


@dataclass(frozen=True)
class ArchSpec:
    """What the graph builder needs to know about a family beyond its HF config.

    norm_layout: "pre" (Llama: norm -> block -> add), "sandwich" (Gemma-2/3: norms before and
    after each block), "post" (OLMo-2: block -> norm -> add). qk_norm: "head" (RMSNorm over
    head_dim, Qwen3/Gemma-3) or "full" (over all heads, OLMo-2).
    """

    name: str
    embed: str = "model.embed_tokens.weight"
    final_norm: str = "model.norm.weight"
    lm_head: str = "lm_head.weight"
    layer_prefix: str = "model.layers.{i}."
    layer: LayerNames = field(default_factory=LayerNames)
    norm_layout: str = "pre"
    qk_norm: str | None = None
    activations: tuple[str, ...] = ("silu",)
    rope_types: tuple[str, ...] = ROPE_TYPES

    def layer_tensor(self, i: int, module: str, suffix: str = "weight") -> str:
        return f"{self.layer_prefix.format(i=i)}{module}.{suffix}"
