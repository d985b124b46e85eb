"""Module names of the nGPT layer (Dory, docs/coverage.md §16): every hidden state kept on the unit
sphere by weightless L2 norms (norm kind "l2"), each residual add an interpolation towards the normed
block output at a learned per-channel rate, and learned per-channel scales on the query (after RoPE),
the output gate's pre-activation, the MLP's gate and up, and the logits. Names are relative to the layer
(`lm_head_scale` to the checkpoint root); the constants each vector is multiplied by are the config's
(model/ngpt.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NgptNames:
    """The stored scale vectors of an nGPT layer and head."""

    attention_rate: str = "lambda_1"  # |lambda_1 x ngpt_alpha_init / initializer_range|, per hidden channel
    mlp_rate: str = "lambda_2"
    query_scale: str = "self_attn.sqk"  # (sqk x sqrt(head_dim) / initializer_range) ** 2, per query channel
    gate_scale: str = "self_attn.s_gate"  # (s_gate x hidden ** 0.25 / initializer_range) ** 2, per gate channel
    mlp_gate_scale: str = "mlp.suv_gate"  # suv_gate x sqrt(hidden), per intermediate channel
    mlp_up_scale: str = "mlp.suv_up"
    logit_scale: str = "lm_head.logit_scale"  # logit_scale / initializer_range, per vocabulary entry, fp32
