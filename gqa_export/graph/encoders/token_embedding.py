"""The embedding model of a multimodal package: input_ids + image_features (+ audio_features) ->
inputs_embeds (docs/multimodal.md §5, §16).

Every id is embedded as the decoder embeds it (the same table and multiplier). Then the k-th
image placeholder of the flattened batch takes feature row k, but only where row k exists:
onnxruntime-genai runs this model on every step and, after the prompt, passes image_features
with 0 rows, so a generated placeholder id is embedded as the token it is, as HF does. The rows
are gathered from the features with one zero row appended, so an index never falls outside them.

An image_token_id of -1 stands for every negative id (genai's phi3v writes image N's placeholders
as -N; embedded as id 0 where no row replaces them, as the remote code clamps them).

With k more feature sets per image token (Qwen3-VL's deepstack, docs/multimodal.md §11.5) the
feature rows are hidden·(1 + k) wide and so is inputs_embeds: the embeddings, then each set's
row at the placeholders that take one and zeros everywhere else (the decoder adds them).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gqa_export import __version__
from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.input_embedding import placeholders_as_pad
from gqa_export.graph.params import NUMPY_DTYPES, Params
from gqa_export.model.dims import ModelDims

OPSETS = {"": 21}
B, S = "batch_size", "sequence_length"


def build_token_embedding(
    dims: ModelDims,
    spec: ArchSpec,
    params: Params,
    image_token_id: int,
    audio_token_id: int | None = None,
    feature_slices: int = 0,
) -> ir.Model:
    """input_ids + image_features (+ audio_features where the package has a speech model) ->
    inputs_embeds: each kind of placeholder takes the rows of its own features (§5, §16). With
    `feature_slices` k the image rows are k + 1 slices wide and so is inputs_embeds: the slices
    past the first are zero where no image row is (Qwen3-VL's deepstack, §11.5)."""
    b = GraphBuilder("gqa_export_embedding", OPSETS)
    dtype, hidden = params.dtype, dims.hidden_size
    wide = hidden * (1 + feature_slices)
    if feature_slices and audio_token_id is not None:
        raise ValueError("widened image rows (deepstack) and audio features in one embedding model are not built")
    input_ids = b.input("input_ids", ir.DataType.INT64, [B, S])
    # no declared rank: on the prompt genai passes the vision output ([images, tokens, hidden]),
    # after it an empty [0, hidden] (docs/multimodal.md §2)
    features = ir.Value(name="image_features", type=ir.TensorType(dtype), shape=None)
    b.graph.inputs.append(features)
    audio = b.input("audio_features", dtype, ["num_audio_tokens", hidden]) if audio_token_id is not None else None
    table = spec.tensor(spec.embed)
    with b.scope("embed_tokens"):
        weight = b.initializer(table, params.matrix(table))  # before the placeholder constants (their byte order)
        ids = placeholders_as_pad(b, input_ids, dims)
        if image_token_id < 0:  # genai's phi3v: image N's placeholders are -N, embedded as id 0 where no row does
            ids = b.op("Max", ids, b.const(0, "first_row", "int64"))
        h = b.op("Gather", weight, ids)
        if dims.embedding_multiplier != 1.0:
            scale = b.const(np.array(dims.embedding_multiplier, NUMPY_DTYPES[dtype]), "scale")
            h = b.op("Mul", h, scale)
    with b.scope("image_features"):
        out = _merge(b, h, input_ids, features, image_token_id, (hidden, wide), dtype, "image_token_id")
    if audio is not None and audio_token_id is not None:
        with b.scope("audio_features"):
            out = _merge(b, out, input_ids, audio, audio_token_id, (hidden, hidden), dtype, "audio_token_id")
    b.output(typed(out, dtype, [B, S, wide]), "inputs_embeds", dtype, [B, S, wide])
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _merge(
    b: GraphBuilder,
    h: ir.Value,
    input_ids: ir.Value,
    features: ir.Value,
    token_id: int,
    widths: tuple[int, int],
    dtype: ir.DataType,
    id_name: str,
) -> ir.Value:
    """h with the k-th `token_id` placeholder of the flattened batch replaced by feature row k,
    where that row exists. `widths` = (h's width, the feature rows' width): rows wider than h
    keep their extra columns appended to every position (zero where no row is)."""
    hidden, wide = widths
    features = b.op("Reshape", features, b.const([-1, wide], "feature_rows", "int64"))
    flat_ids = b.op("Reshape", input_ids, b.const([-1], "flat", "int64"))
    if token_id < 0:  # every negative id (genai's phi3v placeholders -N)
        is_token = b.op("Less", flat_ids, b.const(0, id_name, "int64"))
    else:
        is_token = b.op("Equal", flat_ids, b.const(token_id, id_name, "int64"))
    rank = b.op("Sub", b.op("CumSum", b.op("Cast", is_token, to=ir.DataType.INT64), b.const(0, "axis", "int64")),
                b.const(1, "one", "int64"))  # fmt: skip
    rows = b.op("Shape", features, start=0, end=1)
    has_row = placeholders_with_row(b, is_token, rank, rows)
    index = b.op("Where", has_row, rank, rows)
    zero_row = b.const(np.zeros((1, wide), NUMPY_DTYPES[dtype]), "zero_row")
    gathered = b.op("Gather", b.op("Concat", features, zero_row, axis=0), index)
    stacked = None
    if wide != hidden:  # the columns past `hidden`: zero where no feature row is (the appended row)
        split = b.const([hidden, wide - hidden], "widths", "int64")
        gathered, stacked = b.op_multi("Split", gathered, split, axis=-1, outputs=2)
    flat_h = b.op("Reshape", h, b.const([-1, hidden], "rows", "int64"))
    merged = b.op("Where", b.op("Unsqueeze", has_row, b.const([1], "last", "int64")), gathered, flat_h)
    shape = b.op("Shape", h)
    if stacked is not None:
        merged = b.op("Concat", merged, stacked, axis=-1)
        shape = b.op("Concat", b.op("Shape", h, start=0, end=2), b.const([wide], "width", "int64"), axis=0)
    return b.op("Reshape", merged, shape)


def placeholders_with_row(b: GraphBuilder, is_image: ir.Value, rank: ir.Value, rows: ir.Value) -> ir.Value:
    """The placeholders that take a feature row: the k-th one where k < the rows given (none after
    the prompt, so a generated placeholder id stays the token it is)."""
    return b.op("And", is_image, b.op("Less", rank, rows))
