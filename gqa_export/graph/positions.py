"""Learned absolute position embeddings (GPT-2's wpe, OPT's embed_positions), and the queries'
position-dependent scales (Ministral-3's llama-4 scaling, Llama-4's attention temperature tuning,
Beam's scalable softmax).

The table's row for each token's position is added to its embedding before the first layer. The
position is counted from attention_mask as HF generate counts it (cumsum(mask) - 1 over this step's
tokens): a right-padded row and its decode steps get the positions of the unpadded row, and a
decode step after the prompt gets the next position, whatever the KV buffer's size.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.masks import token_positions
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"


def add_absolute_positions(
    b: GraphBuilder,
    h: ir.Value,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
    embeds_given: bool = False,
) -> ir.Value:
    """h + table[position + offset] when the spec has a position table, else h unchanged.
    `input_ids` lends its [B, S] shape (inputs_embeds does too), and for fairseq's make_positions its ids:
    `embeds_given` says they are not read (HF then numbers the tokens in sequence, as the mask does)."""
    if spec.positions is None:
        return h
    name = spec.tensor(spec.positions.table)
    offset = position_offset(spec, dims)
    if spec.positions.sinusoidal:
        rows = dims.max_position_embeddings + offset
        if spec.positions.sinusoid_rates == "transformer":  # CTRL: no padding row
            values = transformer_sinusoids(rows, dims.hidden_size)
        else:
            values = sinusoidal_table(rows, dims.hidden_size, dims.padding_idx)
        table = b.initializer(name, params.table(values))
    else:
        table = b.initializer(name, params.matrix(name))
    with b.scope("embed_positions"):
        if spec.positions.offset_after_pad and not embeds_given:
            positions = pad_skipping_positions(b, input_ids, attention_mask, offset - 1)
        else:
            positions = token_positions(b, input_ids, attention_mask)
            if offset:
                positions = b.op("Add", positions, b.const(offset, "offset", "int64"))
        rows = typed(b.op("Gather", table, positions), params.dtype, [B, S, dims.hidden_size])
        return typed(b.op("Add", h, rows, name="add_positions"), params.dtype, [B, S, dims.hidden_size])


def position_offset(spec: ArchSpec, dims: ModelDims) -> int:
    """The table row of position 0: the spec's fixed offset, or pad_token_id + 1 (fairseq's make_positions,
    whose padding row sits below the first position; the spec refuses a config without pad_token_id)."""
    assert spec.positions is not None
    if spec.positions.offset_after_pad:
        assert dims.padding_idx is not None, "the spec's Refusal on pad_token_id None"
        return dims.padding_idx + 1
    return spec.positions.offset


def pad_skipping_positions(b: GraphBuilder, input_ids: ir.Value, attention_mask: ir.Value, pad: int) -> ir.Value:
    """[B,S] table rows of fairseq's make_positions (Kosmos-2's create_position_ids_from_input_ids): a pad id's
    token gets row `pad` (the table's zero row), every other token `pad` + the cached tokens + the non-pad
    tokens of this step up to it. A prompt holding the pad id numbers its later tokens one lower, and a decode
    step counts the cache whole, as HF does."""
    with b.scope("pad_skipping"):
        one = b.const([1], "one", "int64")
        total = b.op("Shape", attention_mask, start=1, end=2)
        past = b.op("Sub", total, b.op("Shape", input_ids, start=1, end=2))
        cached = b.op("ReduceSum", b.op("Slice", attention_mask, b.const([0], "zero", "int64"), past, one), one)
        real = b.op("Cast", b.op("Not", b.op("Equal", input_ids, b.const(pad, "pad", "int64"))), to=ir.DataType.INT64)
        step = b.op("Mul", b.op("Slice", attention_mask, past, total, one), real)
        counted = b.op("Add", cached, b.op("CumSum", step, one))
        return b.op("Add", b.op("Mul", counted, real), b.const(pad, "pad_row", "int64"))


def sinusoidal_table(rows: int, width: int, padding_row: int | None) -> np.ndarray:
    """float32 [rows, width]: row p is [sin(p f_i) | cos(p f_i)], f_i = exp(-i log(10000) / (width/2 - 1)),
    a zero column for an odd width, the padding row zero (XGLM's get_embedding, in its float32 steps)."""
    half = width // 2
    step = np.float32(np.log(10000.0) / (half - 1))
    freqs = np.exp(np.arange(half, dtype=np.float32) * -step)
    angles = np.arange(rows, dtype=np.float32)[:, None] * freqs[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    if width % 2:
        table = np.concatenate([table, np.zeros((rows, 1), np.float32)], axis=1)
    if padding_row is not None and 0 <= padding_row < rows:
        table[padding_row] = 0.0
    return table.astype(np.float32)


def transformer_sinusoids(rows: int, width: int) -> np.ndarray:
    """float32 [rows, width]: row p is [sin(p f_0), sin(p f_1), ... | cos(p f_0), ...], f_i = 1 / 10000^(2i / width),
    the original Transformer's rates laid out in halves (CTRL's positional_encoding, in its float32 steps:
    the sines of the even channels' angles, then the cosines of the odd ones', which have the same rates)."""
    channels = np.arange(width, dtype=np.float32)
    # torch's float32 pow is the correctly rounded one: the float64 power rounded (numpy's float32 pow is an ulp off)
    powers = np.power(10000.0, ((2 * (channels // 2)) / np.float32(width)).astype(np.float64)).astype(np.float32)
    angles = np.arange(rows, dtype=np.float32)[:, None] * (np.float32(1.0) / powers)[None, :]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1).astype(np.float32)


def position_query_scale(
    b: GraphBuilder,
    scale: tuple[float, int] | None,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dtype: ir.DataType,
    offset: int = 0,
    scope: str = "query_scale",
) -> ir.Value | None:
    """[B,S,1]: 1 + beta * log(1 + floor((pos + offset) / length)) for this step's tokens
    (Ministral-3's llama-4 attention scale; Llama-4's temperature tuning counts from 1), pos =
    cumsum(attention_mask) - 1 as HF generate's position_ids (its cache positions for right padding)."""
    if scale is None:
        return None
    beta, length = scale
    with b.scope(scope):
        positions = token_positions(b, input_ids, attention_mask)
        if offset:
            positions = b.op("Add", positions, b.const(offset, "offset", "int64"))
        # in the graph's dtype: a float32 constant would be the one float32 initializer of an fp16 graph
        blocks = b.op("Cast", b.op("Div", positions, b.const(length, "length", "int64")), to=dtype)
        one = b.const(np.asarray(1.0, np.float32).astype(NUMPY_DTYPES[dtype]), "one")
        beta_value = b.const(np.asarray(beta, np.float32).astype(NUMPY_DTYPES[dtype]), "beta")
        factor = b.op("Add", one, b.op("Mul", beta_value, b.op("Log", b.op("Add", one, blocks))))
        return b.op("Unsqueeze", factor, b.const([-1], "last", "int64"))


def power_query_scale(
    b: GraphBuilder,
    power: tuple[float, int] | None,
    input_ids: ir.Value,
    attention_mask: ir.Value,
    dtype: ir.DataType,
) -> ir.Value | None:
    """[B,S,1]: (1 + (pos + 1) / length) ** exponent for this step's tokens, as exp(exponent *
    log(1 + x)) the way the modeling code computes it (Beam's scalable softmax on its NoPE layers'
    queries), pos = cumsum(attention_mask) - 1 as HF generate's position_ids: a decode step reads its
    own position, a right-padded row the positions of its unpadded tokens."""
    if power is None:
        return None
    exponent, length = power
    with b.scope("nope_query_power"):
        positions = b.op("Add", token_positions(b, input_ids, attention_mask), b.const(1, "offset", "int64"))
        np_dtype = NUMPY_DTYPES[dtype]
        length_value = b.const(np.asarray(length, np.float32).astype(np_dtype), "length")
        ratio = b.op("Div", b.op("Cast", positions, to=dtype), length_value)
        one = b.const(np.asarray(1.0, np.float32).astype(np_dtype), "one")
        exponent_value = b.const(np.asarray(exponent, np.float32).astype(np_dtype), "exponent")
        factor = b.op("Exp", b.op("Mul", exponent_value, b.op("Log", b.op("Add", one, ratio))))
        return b.op("Unsqueeze", factor, b.const([-1], "last", "int64"))


def log_positions(b: GraphBuilder, input_ids: ir.Value, attention_mask: ir.Value, dtype: ir.DataType) -> ir.Value:
    """[B,S,1]: log(pos + 1) for this step's tokens in the graph's dtype (Mistral-Large-4's per-head query scale
    scale_h * log(pos + 1) + bias_h, graph/latent_attention.py), pos = cumsum(attention_mask) - 1."""
    with b.scope("log_positions"):
        positions = b.op("Add", token_positions(b, input_ids, attention_mask), b.const(1, "offset", "int64"))
        logs = b.op("Cast", b.op("Log", b.op("Cast", positions, to=ir.DataType.FLOAT)), to=dtype)
        return b.op("Unsqueeze", logs, b.const([-1], "last", "int64"))
