"""The static-shape decoder graph (QNN, docs/eps.md §7): one of a prefill (S = window) and a decode
(S = 1) pair that share every weight and one fixed KV buffer.

Graph I/O (all shapes static, batch 1): `input_ids` [1, S] int32, `past_sequence_length` [1, 1]
and `total_sequence_length` [1] int32 (onnxruntime-genai's windowed input ids feed both only when
the graph has both; the second bounds the write slots), `past_key_values.%d.key/value` [1, kv_heads, C, D] and outputs
`logits` [1, S, V], `present.%d.key/value` [1, kv_heads, C, D] (the same buffer, written in place).
No `attention_mask` and no `position_ids`: with the runtime's end padding the windowed mask and
positions it would feed are not the ones a token needs (§7.1), so both come from the length.

The layers are the dynamic graph's (`decoder_layer.decoder_layer`); only attention differs
(`static_attention`). What a static graph cannot hold is refused in one line before building.
"""

from __future__ import annotations

from functools import partial

import onnx_ir as ir

from gqa_export import __version__
from gqa_export.arch.spec import ArchSpec
from gqa_export.errors import InputError
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder
from gqa_export.graph.decoder import PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE, final_norm
from gqa_export.graph.decoder_layer import decoder_layer, layer_scalar
from gqa_export.graph.input_embedding import embed_input
from gqa_export.graph.options import GraphOptions
from gqa_export.graph.outputs import OutputContext, lm_head
from gqa_export.graph.params import Params
from gqa_export.graph.rotary import rope_caches, rope_tables
from gqa_export.graph.static_attention import static_attention, static_steps
from gqa_export.model.dims import ModelDims
from gqa_export.model.rope import longrope_switch

OPSET = {"": 21, "com.microsoft": 1}
PAST_LENGTH, TOTAL_LENGTH = "past_sequence_length", "total_sequence_length"


def static_refusal(dims: ModelDims, spec: ArchSpec, opts: GraphOptions) -> str | None:
    """Why a model cannot be a static graph pair, or None."""
    layers = dims.layers
    reasons = {
        "recurrent-state layers": any(layer.mixer != "attention" or not layer.attends for layer in layers),
        "mixture-of-experts layers": any(layer.sparse for layer in layers) or dims.moe is not None,
        "KV-shared layers": any(layer.shares_kv for layer in layers),
        "chunked attention": any(layer.chunk for layer in layers),
        "latent attention": dims.latent is not None,
        "ALiBi": bool(dims.alibi),
        "attention sinks": spec.attention_sinks is not None,
        "per-layer inputs": bool(dims.per_layer_input_size) or dims.altup is not None,
        "hyper-connection residual streams": dims.hyper is not None,
        "position-dependent query scales": any(
            scale is not None for scale in (dims.query_scale, dims.nope_query_scale, dims.nope_query_power)
        ),
        "absolute position embeddings": spec.positions is not None,
        "an attention output gate": spec.attention_output_gate or spec.layer.output_gate is not None,
        "weight-shared layer stacks run in cycles": dims.recurrent_stacks is not None,
        "weight-shared layers run in a loop": dims.recurrent_loop is not None,
        "bidirectional token blocks": bool(opts.bidirectional_ids),
        "M-RoPE positions, inputs_embeds or pipeline outputs": opts.mrope_positions
        or opts.inputs_embeds
        or opts.hidden_states
        or opts.logits != "all",
        "LoRA inputs": bool(opts.lora_targets),
    }
    found = [what for what, present in reasons.items() if present]
    return found[0] if found else None


def build_static_decoder(
    dims: ModelDims, spec: ArchSpec, params: Params, opts: GraphOptions, step: int, context: int
) -> ir.Model:
    """The graph for `step` tokens per run over a `context`-slot KV buffer."""
    why = static_refusal(dims, spec, opts)
    if why is not None:
        raise InputError(f"a static-shape (QNN) graph cannot hold {why}; export for --ep cpu")
    _check_longrope(dims, context)
    b = GraphBuilder("gqa_export_static_decoder", OPSET)
    input_ids = b.input("input_ids", ir.DataType.INT32, [1, step])
    past_length = b.input(PAST_LENGTH, ir.DataType.INT32, [1, 1])
    total_length = b.input(TOTAL_LENGTH, ir.DataType.INT32, [1])
    pasts = {}
    for i in range(dims.num_layers):
        layer = dims.layers[i]
        shape = [1, layer.num_kv_heads, context, layer.head_dim]
        pasts[i] = (b.input(PAST_KEY % i, opts.io_dtype, shape), b.input(PAST_VALUE % i, opts.io_dtype, shape))
    steps = static_steps(
        b, past_length, total_length, step, context, {layer.window for layer in dims.layers}, opts.io_dtype
    )
    # longrope (If-less offset form): context <= the switch (checked above), so this folds to the
    # short table, which is HF's for every sequence that fits (docs/eps.md §7.5)
    caches = rope_caches(b, dims, params, opts, b.const([context], "total", "int32"))
    rope = rope_tables(b, steps.positions, caches)
    # embed_input reads the mask only for absolute positions, refused above
    h, embed, _ = embed_input(b, None, input_ids, input_ids, dims, spec, params, opts.io_dtype)
    kv = {}
    for i in range(dims.num_layers):
        with b.scope(f"layers.{i}"):
            view = dims.of_layer(dims.layers[i])
            lc = LayerContext(b, i, view, spec, params, opts.packed_qkv, packed_gate_up=opts.packed_gate_up)
            attention = partial(static_attention, past=pasts[i], steps=steps, rope=rope)
            h, kv[i] = decoder_layer(lc, h, attention, None)
            h = layer_scalar(lc, h)
    x = final_norm(b, h, spec, params, dims)
    logits = lm_head(b, x, embed, OutputContext(dims, spec, params, opts))
    _fold_shapes(b, [1, step, dims.logits_width])
    b.output(logits, "logits", opts.logits_dtype, [1, step, dims.logits_width])
    for i in range(dims.num_layers):
        layer, layer_kv = dims.layers[i], kv[i]
        shape = [1, layer.num_kv_heads, context, layer.head_dim]
        assert layer_kv is not None and layer_kv.present_key is not None and layer_kv.present_value is not None
        b.output(layer_kv.present_key, PRESENT_KEY % i, opts.io_dtype, shape)
        b.output(layer_kv.present_value, PRESENT_VALUE % i, opts.io_dtype, shape)
    return ir.Model(b.graph, ir_version=10, producer_name="gqa-export", producer_version=__version__)


def _check_longrope(dims: ModelDims, context: int) -> None:
    """HF picks longrope's table from the length seen so far and re-runs the whole sequence at the
    step that crosses the switch; windows cannot follow it, so a buffer past the switch is refused
    (docs/eps.md §7.5). Within it the short table is HF's at every step."""
    for rope in dims.ropes.values():
        switch = longrope_switch(rope)
        if switch is not None and context > switch:
            raise InputError(
                f"a static-shape (QNN) graph cannot switch longrope to its long table past {switch} positions: "
                f"export with a --max-length of at most {switch} (a multiple of 64), or for --ep cpu"
            )


def _fold_shapes(b: GraphBuilder, logits_shape: list[int]) -> None:
    """The tied lm_head reshapes its Gemm output by Shape(x)[:2] + [vocab]; QNN has no Shape, and
    here the shape is known: the Reshape gets it as a constant."""
    for shape in [n for n in b.graph if n.op_type == "Shape"]:
        concat = _only_use(shape, "Concat")
        reshape = _only_use(concat, "Reshape")
        reshape.replace_input_with(1, b.const(logits_shape, "logits_shape", "int64"))
        b.graph.remove([concat, shape], safe=True)


def _only_use(node: ir.Node, op_type: str) -> ir.Node:
    """The one node reading `node`'s output, of `op_type`; else the Shape cannot be folded."""
    uses = [use.node for use in node.outputs[0].uses()]
    if len(uses) != 1 or uses[0].op_type != op_type:
        found = ", ".join(u.op_type for u in uses) or "nothing"
        raise InputError(
            f"a static-shape (QNN) graph cannot fold a Shape whose {node.op_type} feeds {found}, not one {op_type}"
        )
    return uses[0]
