"""Sparse (mixture-of-experts) MLP blocks: com.microsoft.MoE, or plain ops where no kernel fits.

Facts relied on (docs/moe.md, probed on onnxruntime 1.31.1 CPU):
- MoE takes the router *logits* as `router_probs`, applies softmax over all experts, picks the top
  k and renormalizes them when `normalize_routing_weights=1` (top-k-then-softmax routers, as
  GraniteMoE's and gpt-oss's, are the renormalized form) (docs/moe.md §4).
- The CPU kernels accept SwiGLU only as `swiglu_fusion=1` (gate/up rows interleaved in fc1); out =
  G*sigmoid(alpha G)*(L+beta) with G = min(g, limit), L = clip(u, -limit, limit)
  (docs/moe.md §1.1, §2); gpt-oss is alpha 1.702, beta 1, its limit (docs/moe.md §5).
- Routers the op cannot express (PhiMoE's sparsemixer, the biased choices of LFM2-MoE and
  ERNIE-4.5-MoE, the grouped ones of DeepSeek and GLM-4-MoE, docs/moe.md §8.1) are
  computed in the graph as dense weights w [T, E] (zero off the selected experts):
  `router_probs = log(w)`, no renormalization, and the output times sum(w), since the op's softmax
  turns log(w) into w / sum(w) (docs/moe.md §4).
- No CPU kernel runs a GELU-gated (GeGLU) expert (docs/moe.md §2): Gemma-4's experts are plain
  ops (docs/moe.md §8).
- No kernel runs a squared-ReLU expert: ungated experts (spec activation "ungated") are two plain
  MatMuls over every expert (graph/ungated_experts.py, docs/hybrid-state.md §8.7).
The quantize stage turns MoE into QMoE for int4/int8 (quantize.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx_ir as ir

from gqa_export.graph.activations import softcapped_swiglu
from gqa_export.graph.blocks import LayerContext, linear
from gqa_export.graph.builder import float_scalar, typed
from gqa_export.graph.dense_routing import dense_routing
from gqa_export.graph.experts import ExpertLayout, ExpertWeights, check_layout, fused_or_transposed, stacked
from gqa_export.graph.input_scaled_experts import input_scaled_experts, top1_scaled_input
from gqa_export.graph.limited_swiglu import limited_rows, shared_gated, unscaled
from gqa_export.graph.mlp import gated_mlp, mlp_block
from gqa_export.graph.params import NUMPY_DTYPES, WIDER_THAN_IO_META, Params
from gqa_export.graph.pooled_experts import pooled_experts
from gqa_export.graph.shared_sink_routing import sink_shared_experts
from gqa_export.graph.stream_router import stream_router_logits
from gqa_export.graph.ungated_experts import ungated_experts, ungated_shared_expert
from gqa_export.graph.zero_experts import all_zero_guard, zero_experts
from gqa_export.model.moe import MoeDims

B, S = "batch_size", "sequence_length"


def sparse_mlp(lc: LayerContext, x: ir.Value, router_input: ir.Value | None = None) -> ir.Value:
    """The layer's sparse block on x [B,S,H] (the router reads `router_input`, default x)."""
    spec, moe = lc.spec.moe, lc.dims.moe
    assert spec is not None and moe is not None
    names = lc.spec.moe.names
    prefix = _block_prefix(lc)
    routing_lc = _routing_context(lc)
    router_x = x if router_input is None else router_input
    before = set(lc.b.graph.initializers)
    if routing_lc is not lc:
        router_x = lc.b.op("Cast", router_x, to=ir.DataType.FLOAT, name="router_input")
    router = _router(routing_lc, prefix, router_x, moe)
    # no MoE kernel has squared ReLU, nor a norm on each expert's output (Muse-Spark's pooled experts): plain ops on
    # dense routing weights
    if spec.activation == "ungated" or names.latent is not None:
        dense = dense_routing(routing_lc, prefix, router, moe)
        assert dense is not None, f"{spec.routing}: plain-op experts take a router computed as dense weights"
        if routing_lc is not lc:  # chosen in fp32 (spec router_dtype), weighted in the export dtype
            dense = lc.b.op("Cast", dense, to=lc.params.dtype, name="routing_weights")
        out = (ungated_experts if spec.activation == "ungated" else pooled_experts)(lc, x, dense, moe, prefix)
    else:
        out = _routed_experts(lc, x, router, moe, prefix, routing_lc)
    if routing_lc is not lc:  # the router's float32 weights and constants, kept so on purpose
        for name in set(lc.b.graph.initializers) - before:
            value = lc.b.graph.initializers[name]
            if value.const_value is not None and value.const_value.dtype == ir.DataType.FLOAT:
                value.meta[WIDER_THAN_IO_META] = True
    if names.shared_expert and moe.shared_intermediate:  # GLM-4-MoE / ERNIE-4.5-MoE may have none
        shared = ungated_shared_expert if spec.activation == "ungated" else _shared_expert
        if spec.routing == "sigmoid_shared_sink":  # Inkling: each shared expert times its routing weight
            shared = sink_shared_experts
        out = lc.b.op("Add", out, shared(lc, x, prefix), name="add_shared_expert")
        if moe.shared_average:  # Cohere2-MoE's "average" combination
            out = lc.b.op(
                "Mul", out, lc.b.const(np.asarray(0.5, NUMPY_DTYPES[lc.params.dtype]), "half"), name="shared_average"
            )
    if names.shared_mlp and moe.shared_intermediate:  # Granite-4.0-H, GraniteMoE-Shared (none when 0 wide)
        gate_up, down = names.shared_mlp
        with lc.b.scope("shared_mlp"):
            out = lc.b.op("Add", out, gated_mlp(lc, x, gate_up, down, moe.shared_intermediate), name="add_shared_mlp")
    if names.output_bias:  # JetMoE: a bias after the experts
        bias = lc.name(f"{prefix}{names.output_bias}", suffix="")
        out = lc.b.op("Add", out, lc.b.initializer(bias, lc.params.vector([bias])), name="output_bias")
    return typed(out, lc.params.dtype, [B, S, lc.dims.hidden_size])


def _routed_experts(
    lc: LayerContext, x: ir.Value, router: ir.Value, moe: MoeDims, prefix: str, routing_lc: LayerContext
) -> ir.Value:
    """The gated experts: the MoE/QMoE op, or plain ops where no kernel computes the form."""
    spec = lc.spec.moe
    assert spec is not None
    weights = ExpertWeights(lc.params.store, _layout(lc, prefix, moe))
    if spec.routing == "sigmoid_scaled_input" and moe.top_k > 1:
        return input_scaled_experts(lc, x, router, weights, moe)
    if spec.routing == "sigmoid_scaled_input":  # top-1: the op on the scaled input, weight 1
        return _experts_op(lc, top1_scaled_input(lc, x, router), router, weights, moe, prefix, routing_lc)
    if spec.activation == "geglu":
        return _experts_with_ops(lc, x, router, weights, moe)
    if spec.activation == "swiglu_softcapped":  # Inkling2: no kernel soft-caps gate and up, plain ops
        dense = dense_routing(routing_lc, prefix, router, moe)
        assert dense is not None, f"{spec.routing}: soft-capped experts take a router computed as dense weights"
        if routing_lc is not lc:
            dense = lc.b.op("Cast", dense, to=lc.params.dtype, name="routing_weights")
        return _experts_with_ops(lc, x, dense, weights, moe)
    return _experts_op(lc, x, router, weights, moe, prefix, routing_lc)


def _block_prefix(lc: LayerContext) -> str:
    names = lc.spec.moe.names  # type: ignore[union-attr]
    for block in names.blocks:
        if any(lc.has(f"{block}{r}") for r in names.routers):
            return block
    return names.blocks[0]


def _router(lc: LayerContext, prefix: str, x: ir.Value, moe: MoeDims) -> ir.Value:
    """Router logits [B,S,E] (Gemma-4: the experts' weights, dense [B,S,E], see `_normed_residual_router`)."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    module = next((f"{prefix}{r}" for r in names.routers if lc.has(f"{prefix}{r}")), f"{prefix}{names.routers[0]}")
    if lc.spec.moe.routing == "normed_residual":  # type: ignore[union-attr]
        return _normed_residual_router(lc, x, module, moe)
    if lc.spec.moe.routing == "skip_stream":  # type: ignore[union-attr]  # ZAYA: an MLP over a carried stream
        return stream_router_logits(lc, x, prefix)
    with lc.b.scope("router"):
        logits = linear(lc, x, [module], None, "logits")
        if moe.logit_scale != 1.0:  # Muse-Spark: the logits times output_multiplier before their scores
            scale = float_scalar(lc.b, moe.logit_scale, lc.params.dtype, "router_logit_scale")
            logits = lc.b.op("Mul", logits, scale, name="scaled_logits")
        return logits


def _routing_context(lc: LayerContext) -> LayerContext:
    """The context the router computes in: the layer's own, or an fp32 one where the family's
    router computes in fp32 (spec router_dtype) and the export dtype is narrower (docs/moe.md §8.3).
    Its float32 initializers are marked for quantize.py to leave float and in their dtype."""
    spec = lc.spec.moe
    assert spec is not None
    if spec.router_dtype != "float32" or lc.params.dtype == ir.DataType.FLOAT or spec.activation == "geglu":
        return lc  # (the plain-op experts of a GeGLU family read the router in the layer's dtype)
    return replace(lc, params=Params(lc.params.store, ir.DataType.FLOAT))


def _layout(lc: LayerContext, prefix: str, moe: MoeDims) -> ExpertLayout:
    """Which of the family's expert layouts this checkpoint uses (checked against the config)."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    E, I, H = moe.experts, moe.intermediate, lc.dims.hidden_size  # noqa: E741
    layer = lc.spec.layer_tensor(lc.i, "", "")
    where = f"layer {lc.i}"
    stacked_rows = tuple(f"{layer}{prefix}{n}" for n in names.stacked_rows or ())
    if stacked_rows and stacked_rows[0] in lc.params.store:  # DBRX: [E*I, H] each
        layout = ExpertLayout(E, I, H, stacked_rows=stacked_rows)  # type: ignore[arg-type]
    elif names.transposed:
        gate_up, down = (f"{layer}{prefix}{n}" for n in names.transposed)
        mxfp4 = f"{gate_up}_blocks" in lc.params.store
        biases = (f"{gate_up}_bias", f"{down}_bias") if f"{gate_up}_bias" in lc.params.store else None
        halves = names.transposed_order == "halves"
        layout = ExpertLayout(E, I, H, transposed=(gate_up, down), mxfp4=mxfp4, biases=biases, halves=halves)
    else:
        layout = None
        for triple in names.per_expert:
            full = tuple(f"{layer}{prefix}{t}.weight" for t in triple)
            if full[0].format(e=0) in lc.params.store:
                _refuse_expert_biases(lc.params, full[0].format(e=0), where)
                layout = ExpertLayout(E, I, H, per_expert=full)  # type: ignore[arg-type]
                break
        for pair in names.fused if layout is None else ():
            full = tuple(f"{layer}{prefix}{t}" for t in pair)
            for candidate in (full, tuple(f"{n}.weight" for n in full)):
                if candidate[0] in lc.params.store:
                    # LongCat-Flash's zero experts: gate_up rows in transformers < 5.25's save ([E + Z, 2I, H],
                    # read by no expert), none from 5.25 ([E, 2I, H]); both are read
                    rows = lc.params.store.info(candidate[0]).shape[0]
                    spare = moe.zero_experts if rows == E + moe.zero_experts else 0
                    layout = ExpertLayout(E, I, H, fused=candidate, spare=spare)  # type: ignore[arg-type]
                    if names.fused_or_transposed:
                        layout = fused_or_transposed(lc.params.store, layout, where)
                    break
            if layout is not None:
                break
        if layout is None:
            from gqa_export.errors import InputError

            raise InputError(
                f"{where}: no expert weights under '{layer}{prefix}' in the checkpoint (looked for the per-expert "
                f"and fused layouts of {lc.spec.name}); the checkpoint does not match its config.json"
            )
    check_layout(lc.params.store, layout, where)
    return layout


def _refuse_expert_biases(params: Params, weight: str, where: str) -> None:
    """Per-expert Linear biases (an ERNIE-4.5-MoE saved by transformers 4.x with use_bias): 4.x adds
    them, 5.x's fused experts have none and drop them, so no one graph matches both."""
    bias = params.held_bias(weight)
    if bias is not None:
        from gqa_export.errors import InputError

        raise InputError(
            f"{where}: the experts carry biases ({bias}), which transformers 4.x adds and 5.x drops; "
            "export a checkpoint without expert biases"
        )


def _experts_op(
    lc: LayerContext,
    x: ir.Value,
    router: ir.Value,
    weights: ExpertWeights,
    moe: MoeDims,
    prefix: str,
    routing_lc: LayerContext,
) -> ir.Value:
    """com.microsoft.MoE over the tokens. A router the op cannot express gives dense routing
    weights computed in the graph: the op gets their log, unnormalized, and the output is scaled
    back by their sum. The routing computes in `routing_lc`'s dtype, cast back to the layer's."""
    b, params = lc.b, lc.params
    I, H = moe.intermediate, lc.dims.hidden_size  # noqa: E741
    base = lc.spec.layer_tensor(lc.i, "moe", "")
    cast = params.cast  # swiglu_limited: the op's limit moved past the activation (graph/limited_swiglu.py)
    fc1_rows, limit, up_scale = limited_rows(lc, weights.fc1_rows, moe.limit)
    fc1 = b.initializer(f"{base}.fc1", stacked(weights, fc1_rows, 2 * I, H, cast, params.dtype))
    fc2 = b.initializer(f"{base}.fc2", stacked(weights, weights.fc2_rows, H, I, cast, params.dtype))
    biases = [weights.bias(0), weights.bias(1)]
    fc1_bias, fc2_bias = (
        b.initializer(f"{base}.fc{i + 1}_bias", params.table(v)) if v is not None else None
        for i, v in enumerate(biases)
    )
    clamped = lc.spec.moe.activation == "swiglu_clamped"  # type: ignore[union-attr]
    dense = dense_routing(routing_lc, prefix, router, moe)
    if routing_lc is not lc and dense is not None:
        dense = b.op("Cast", dense, to=params.dtype, name="routing_weights")
    elif routing_lc is not lc:  # the op's own softmax routing on the logits
        router = b.op("Cast", router, to=params.dtype, name="router_logits")
    probs, post_scale, identity = router, None, None
    if dense is not None and moe.zero_experts:  # LongCat-Flash: x times the zero experts' weights
        dense, identity = zero_experts(lc, x, dense, moe)
    if dense is not None:  # rows of no real expert (zero experts' or the skip expert's choice): guarded
        guard = identity is not None or moe.routing == "skip_stream"
        probs = b.op("Log", all_zero_guard(lc, dense) if guard else dense, name="log_weights")
        post_scale = b.op("ReduceSum", dense, b.const([-1], "last", "int64"), keepdims=1, name="weights_sum")
    # the op takes tokens as rows: x [B*S, H], router_probs [B*S, E]
    rows_h = b.const([-1, lc.dims.hidden_size], "rows_hidden", "int64")
    rows_e = b.const([-1, lc.dims.moe.experts], "rows_experts", "int64")  # type: ignore[union-attr]
    shape = b.op("Shape", x)
    x, probs = b.op("Reshape", x, rows_h), b.op("Reshape", probs, rows_e)
    out = b.op(
        "MoE", x, probs, fc1, fc1_bias, fc2, fc2_bias,
        domain="com.microsoft",
        k=moe.top_k,
        activation_type="swiglu",
        swiglu_fusion=1,
        normalize_routing_weights=int(moe.normalize and post_scale is None),
        activation_alpha=moe.alpha if clamped else 1.0,
        activation_beta=1.0 if clamped else 0.0,
        swiglu_limit=limit,
        name="MoE",
    )  # fmt: skip
    out = b.op("Reshape", out, shape, name="tokens_back")
    out = out if up_scale == 1.0 else unscaled(lc, out, up_scale)
    out = out if post_scale is None else b.op("Mul", out, post_scale, name="sparsemixer_scale")
    return out if identity is None else b.op("Add", out, identity, name="add_zero_experts")


def _shared_expert(lc: LayerContext, x: ir.Value, prefix: str) -> ir.Value:
    """Qwen2-MoE: sigmoid(x @ gate) * down(silu(gate x) * up x), for every token."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    b = lc.b
    with b.scope("shared_expert"):
        module = f"{prefix}{names.shared_expert}"
        packed = lc.has(f"{module}.gate_up_proj")  # stored packed [gate | up] (MiniMax-M3)
        modules = [f"{module}.gate_up_proj"] if packed else [f"{module}.gate_proj", f"{module}.up_proj"]
        gate_up = linear(lc, x, modules, None if packed else f"{module}.gate_up_proj", "gate_up")
        width = lc.dims.moe.shared_intermediate  # type: ignore[union-attr]
        gate, up = b.op_multi("Split", gate_up, b.const([width, width], "split", "int64"), axis=-1, outputs=2)
        y = linear(lc, shared_gated(lc, gate, up), [f"{module}.down_proj"], None, "down")  # Ling 3's limits too
        if names.shared_gate:
            scale = b.op("Sigmoid", linear(lc, x, [f"{prefix}{names.shared_gate}"], None, "gate"))
            y = b.op("Mul", y, scale, name="gated")
        return y


def _normed_residual_router(lc: LayerContext, residual: ir.Value, proj: str, moe: MoeDims) -> ir.Value:
    """Gemma-4's expert weights, dense [B,S,E] (zero off the top k): a scaleless RMSNorm of the
    residual stream, times router.scale * H^-0.5, the projection, softmax over all experts, top-k
    renormalized, times per_expert_scale (modeling_gemma4.py, Gemma4TextRouter)."""
    b, params, dims = lc.b, lc.params, lc.dims
    scale_name = lc.name(proj.removesuffix("proj") + "scale", suffix="")
    per_expert_name = lc.name(proj.removesuffix("proj") + "per_expert_scale", suffix="")
    with b.scope("router"):
        ones = b.const(np.ones(dims.hidden_size, NUMPY_DTYPES[params.dtype]), "unit_weight")
        normed = b.op("SimplifiedLayerNormalization", residual, ones, axis=-1, epsilon=dims.rms_eps, stash_type=1)
        scale = b.initializer(scale_name, params.vector([scale_name]))
        h_scale = b.const(np.asarray(dims.hidden_size**-0.5, NUMPY_DTYPES[params.dtype]), "hidden_scale")
        logits = linear(lc, b.op("Mul", b.op("Mul", normed, scale), h_scale), [proj], None, "proj")
        probs = b.op("Softmax", logits, axis=-1)
        values, indices = b.op_multi("TopK", probs, b.const([moe.top_k], "k", "int64"), axis=-1, outputs=2)
        values = b.op("Div", values, b.op("ReduceSum", values, b.const([-1], "last", "int64"), keepdims=1))
        per_expert = b.initializer(per_expert_name, params.vector([per_expert_name]))
        values = b.op("Mul", values, b.op("Gather", per_expert, indices))
        zeros = b.op("Mul", probs, b.const(np.asarray(0, NUMPY_DTYPES[params.dtype]), "zero"))
        return b.op("ScatterElements", zeros, indices, values, axis=-1, name="dense_weights")


def _experts_with_ops(
    lc: LayerContext, x: ir.Value, weights_dense: ir.Value, experts: ExpertWeights, moe: MoeDims
) -> ir.Value:
    """Every expert on every token, weighted by the dense routing weights (zero off the top k):
    y = sum_e w[..., e] * down_e(gelu_tanh(gate_e x) * up_e x). Exact; E times the compute of the
    fused op, which has no GeGLU kernel on CPU (docs/moe.md §2)."""
    b, params = lc.b, lc.params
    E, I, H = moe.experts, moe.intermediate, lc.dims.hidden_size  # noqa: E741
    base = lc.spec.layer_tensor(lc.i, "moe", "")
    with b.scope("experts"):
        fc1 = b.initializer(f"{base}.fc1", stacked(experts, experts.fc1_rows, 2 * I, H, params.cast, params.dtype))
        fc2 = b.initializer(f"{base}.fc2", stacked(experts, experts.fc2_rows, H, I, params.cast, params.dtype))
        column = b.op("Unsqueeze", x, b.const([2, 4], "axes24", "int64"))  # [B,S,1,H,1]
        h = b.op("MatMul", fc1, column, name="fc1")  # [E,2I,H] @ [B,S,1,H,1] -> [B,S,E,2I,1]
        h = b.op("Reshape", h, b.const([0, 0, E, I, 2], "pairs", "int64"))  # interleaved gate/up rows
        gate, up = b.op_multi("Split", h, b.const([1, 1], "halves", "int64"), axis=-1, outputs=2)
        act = (
            softcapped_swiglu(lc, gate, up)
            if moe.softcaps[0]
            else b.op("Mul", b.op("Gelu", gate, approximate="tanh"), up)
        )
        y = b.op("MatMul", fc2, act, name="fc2")  # [E,H,I] @ [B,S,E,I,1] -> [B,S,E,H,1]
        y = b.op("Squeeze", y, b.const([-1], "last", "int64"))  # [B,S,E,H]
        weighted = b.op("Mul", y, b.op("Unsqueeze", weights_dense, b.const([-1], "lastb", "int64")))
        return b.op("ReduceSum", weighted, b.const([2], "experts_axis", "int64"), keepdims=0, name="combine")


def dense_and_sparse_mlp(lc: LayerContext, x: ir.Value, residual: ir.Value, norm) -> ir.Value:
    """Gemma-4 with enable_moe_block: post_ffn_norm_1(mlp(x)) + post_ffn_norm_2(experts(pre_ffn_norm_2(r)))
    with the router reading the residual r (the outer post_feedforward_layernorm is the caller's)."""
    L = lc.spec.layer
    dense = norm(lc, mlp_block(lc, x), L.post_feedforward_norm_1, "post_feedforward_layernorm_1")
    expert_in = norm(lc, residual, L.pre_feedforward_norm_2, "pre_feedforward_layernorm_2")
    experts = norm(lc, sparse_mlp(lc, expert_in, router_input=residual), L.post_feedforward_norm_2,
                   "post_feedforward_layernorm_2")  # fmt: skip
    return lc.b.op("Add", dense, experts, name="dense_plus_experts")
