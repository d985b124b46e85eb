"""The token mixers that carry recurrent state instead of a KV cache, by mixer kind
(arch/mixer_spec.py MIXER_KINDS): each block takes the layer's normed input and its past states and
returns its output (out_proj included) and its present states, in graph/recurrent_state.py's
STATE_NAMES order. RWKV's whole block carries state and is called by the decoder itself."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.gated_deltanet import gated_deltanet
from gqa_export.graph.lightning import lightning
from gqa_export.graph.mamba import mamba
from gqa_export.graph.mamba2 import mamba2
from gqa_export.graph.mlstm import mlstm
from gqa_export.graph.rglru import rglru
from gqa_export.graph.short_conv import short_conv

# the blocks of the mixers with recurrent state: (lc, x, *pasts) -> (output after out_proj, *presents)
STATE_MIXERS: dict[str, Callable[..., tuple[ir.Value, ...]]] = {
    "short_conv": short_conv,
    "gated_deltanet": gated_deltanet,
    "mamba2": mamba2,
    "mamba": mamba,
    "rglru": rglru,
    "lightning": lightning,
    "mlstm": mlstm,
}


def state_mixer(
    block: Callable[..., tuple[ir.Value, ...]],
    lc: LayerContext,
    x: ir.Value,
    pasts: tuple[ir.Value, ...],
    presents: dict[int, tuple[ir.Value, ...]],
) -> tuple[ir.Value, None]:
    """A recurrent-state layer's mixer (output projection included); its new states go to `presents`."""
    y, *new = block(lc, x, *pasts)
    presents[lc.i] = tuple(new)
    return y, None
