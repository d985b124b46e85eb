"""Swin-style post norms (ArchSpec.swin_norm_switch where the config sets swin_norm: Chameleon).

transformers 5.25's ChameleonSwinDecoderLayer keeps the pre-norm layer's two RMSNorms but moves each
after its block: h = h + input_layernorm(attention(h)), then h = h + post_attention_layernorm(mlp(h)); the
blocks read the raw residual stream. That is the "post" norm layout (block -> norm -> add, EXAONE-4's)
with the input norm as the attention's post norm and the post-attention norm as the MLP's.
"""

from __future__ import annotations

from dataclasses import replace

from gqa_export.graph.blocks import LayerContext


def swin_context(lc: LayerContext) -> LayerContext:
    """The layer's context with its norms in the swin order, where the config sets swin_norm."""
    if not lc.dims.swin_norm:
        return lc
    names = lc.spec.layer
    layer = replace(
        names,
        input_norm=None,
        post_attention_norm=names.input_norm,
        pre_feedforward_norm=None,
        post_feedforward_norm=names.post_attention_norm,
    )
    return replace(lc, spec=replace(lc.spec, norm_layout="post", layer=layer))
