"""Logits a class masks out (ArchSpec.masked_logits: Chameleon's image tokens).

transformers 5.25's ChameleonForConditionalGeneration sets the logits of every image token (the ids
whose names in config.vocabulary_map start with "IMGIMG", not the <image> placeholder or the begin /
end-of-image ids) to torch.finfo(logits.dtype).min after its lm_head, so greedy decoding never picks
one. Built the same way: Where over a constant [V] mask picks the logits dtype's lowest value there,
the other logits pass unchanged (not an added bias, which would round them away).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.params import NUMPY_DTYPES


def masked_logits(b: GraphBuilder, logits: ir.Value, ids: tuple[int, ...], width: int, dtype: ir.DataType) -> ir.Value:
    """logits [B,S,width] with those of `ids` at the dtype's lowest value; as they are without ids."""
    if not ids:
        return logits
    mask = np.zeros(width, dtype=np.bool_)
    mask[list(ids)] = True
    low = np.asarray(ml_dtypes.finfo(NUMPY_DTYPES[dtype]).min, dtype=NUMPY_DTYPES[dtype])
    return b.op("Where", b.const(mask, "masked_ids"), b.const(low, "masked_low"), logits, name="masked_logits")
