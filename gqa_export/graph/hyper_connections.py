"""Hyper-connection residual streams, without DeepSeek-V4's Sinkhorn mixing (HunYuan-V4) or with it
(DeepSeek-V4's manifold-constrained form, `HyperConnectionNames.form` "sinkhorn"; docs/coverage.md).

The residual is K = hc_mult copies of the hidden state, kept here as one [B, S, K, H] tensor, all in fp32
(HF computes every stream weight in fp32 whatever the model's dtype, its parameters kept fp32):
- expand (after the embedding): K equal copies of the embedding;
- before each block (attention, then MLP), with flat = the copies flattened [B, S, K*H],
  `mixes = (flat @ fn.T) * rsqrt(mean(flat^2) + rms_norm_eps)` [B, S, 2K] (the weightless RMS of all copies),
  `pre = sigmoid(mixes[:K] * scale[0] + base[:K]) + hc_eps`,
  `post = hc_magnitude * sigmoid(mixes[K:] * scale[1] + base[K:]) + hc_eps`;
  the block reads `sum_k pre_k copy_k` (through its own input norm) and the copies become
  `copy_k + post_k * block_output` (no comb: the copies are not mixed with each other);
- collapse (before the final norm): `pre = sigmoid(mixes * hc_scale + hc_base) + hc_eps` with the head's
  own map [K, K*H], and the hidden state `sum_k pre_k copy_k`; a spec naming no head (GLM-5-Next) takes
  the copies' unweighted mean instead.

Qwen4-Exp's gated form (HyperConnectionNames.form "gated", docs/coverage.md) keeps the copies and the spread but
computes the weights otherwise, per module (attention, MLP, the model's final mixer):
- normed = each copy RMS-normed on its own (rms_norm_eps) times (1 + hc_norm.weight) [K*H], flat = normed [K*H];
- the block reads `mean_k(mix_k * normed_k)`, mix = sigmoid(up(silu(down(flat) / K))) [K, H] (a low-rank map per
  channel and copy), with no norm of its own (the layers have none);
- each copy adds `2 sigmoid(inject(flat) / K)_k * block_output` (inject [K, K*H]);
- the final mixer's block input (no inject) goes to the lm_head as it is (the model has no final norm).

DeepSeek-V4's Sinkhorn form (HyperConnectionNames.form "sinkhorn"): the map gives (2 + K) K mixes: pre as above,
`post = hc_magnitude * sigmoid(.)` (no eps, the magnitude 2 the class hard-codes and the config's default) and
`comb` [K, K] = softmax over each row of
`mixes * scale[2] + base` + hc_eps, its columns then divided by their sum + hc_eps, then hc_sinkhorn_iters - 1
times the rows and the columns in turn (unrolled: one ReduceSum and one Div each, in fp32 as HF). The copies
become `sum_j comb[j, k] copy_j + post_k * block_output` (comb^T, the order HF reads it in).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from gqa_export.arch.spec import ArchSpec
from gqa_export.graph.blocks import LayerContext
from gqa_export.graph.builder import GraphBuilder, typed
from gqa_export.graph.params import WIDER_THAN_IO_META, Params
from gqa_export.graph.standard import LayerKV
from gqa_export.model.dims import ModelDims

B, S = "batch_size", "sequence_length"
F32 = ir.DataType.FLOAT
Block = Callable[[LayerContext, ir.Value], tuple[ir.Value, LayerKV | None]]
Norm = Callable[[LayerContext, ir.Value, str | None, str], ir.Value]
Mlp = Callable[[LayerContext, ir.Value, ir.Value], ir.Value]


def _f32(b: GraphBuilder, params: Params, name: str, make: Callable[[np.ndarray], np.ndarray]) -> ir.Value:
    """A stored stream parameter through `make`, kept float32 in every package (the quantizers skip it)."""
    stored = np.asarray(params.store.read(name), dtype=np.float32)
    array = np.ascontiguousarray(make(stored), dtype=np.float32)
    value = b.initializer(name, ir.Tensor(array))
    value.meta[WIDER_THAN_IO_META] = True
    return value


def _f32_const(b: GraphBuilder, value: float | np.ndarray, name: str) -> ir.Value:
    """A float32 constant of the stream arithmetic, float32 in every package."""
    const = b.const(np.asarray(value, np.float32), name)
    const.meta[WIDER_THAN_IO_META] = True
    return const


def _sigmoid(b: GraphBuilder, z: ir.Value, relative: bool) -> ir.Value:
    """sigmoid(z); `relative` (the Sinkhorn form): 1 / (1 + exp(-z)), accurate relative to the value, as torch's.
    onnxruntime's CPU Sigmoid is accurate to ~1e-7 absolute (17% off at z = -15, 0 below -17): where every pre
    weight of a token is that small, the collapsed input sits near the block norm's eps and its scale decides
    the norm's output, so the relative error reaches the logits (measured 5.7e-3 to 0.88 on a tiny DeepSeek-V4)."""
    if not relative:
        return b.op("Sigmoid", z)
    one = _f32_const(b, 1.0, "hc_one")
    return b.op("Reciprocal", b.op("Add", one, b.op("Exp", b.op("Neg", z))), name="sigmoid")


def _mixes(b: GraphBuilder, streams: ir.Value, fn: ir.Value, dims: ModelDims) -> ir.Value:
    """(flat @ fn.T) * rsqrt(mean(flat^2) + eps) over the flattened copies [B, S, rows]."""
    assert dims.hyper is not None
    flat = b.op("Reshape", streams, b.const([0, 0, dims.hyper.streams * dims.hidden_size], "hc_flat", "int64"))
    mean = b.op("ReduceMean", b.op("Mul", flat, flat), b.const([-1], "channel_axis", "int64"), keepdims=1)
    inverse = b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean, _f32_const(b, dims.rms_eps, "hc_norm_eps"))))
    return b.op("Mul", b.op("MatMul", flat, fn), inverse, name="mixes")


def _weighted_sum(b: GraphBuilder, streams: ir.Value, weights: ir.Value, dtype: ir.DataType, width: int) -> ir.Value:
    """sum_k weights_k copy_k [B, S, H], cast to the graph's dtype."""
    summed = b.op("Einsum", weights, streams, equation="bsk,bskh->bsh", name="weighted_copies")
    out = summed if dtype == F32 else b.op("Cast", summed, to=dtype)
    return typed(out, dtype, [B, S, width])


def expand_streams(b: GraphBuilder, h: ir.Value, dims: ModelDims) -> ir.Value:
    """[B, S, K, H] fp32: K copies of the embedding."""
    assert dims.hyper is not None
    with b.scope("hc_expand"):
        h = h if h.dtype == F32 else b.op("Cast", h, to=F32)
        copies = b.op("Unsqueeze", h, b.const([2], "stream_axis", "int64"))
        return b.op("Tile", copies, b.const([1, 1, dims.hyper.streams, 1], "hc_copies", "int64"), name="streams")


def pre_post_split(b: GraphBuilder, weights: ir.Value, k: int) -> tuple[ir.Value, ir.Value]:
    """(pre, post) [B, S, K] each: the first K weights mix the copies in, the last K spread the output."""
    pre, post = b.op_multi("Split", weights, b.const([k, k], "pre_post_split", "int64"), axis=-1, outputs=2)
    return pre, post


def _sinkhorn(b: GraphBuilder, logits: ir.Value, k: int, eps: float, iters: int) -> ir.Value:
    """comb [B, S, K, K]: softmax over each row + eps, the columns normalized, then the rows and columns in
    turn iters - 1 times, each over its sum + eps (the class's loop, unrolled)."""
    square = b.op("Reshape", logits, b.const([0, 0, k, k], "hc_comb_square", "int64"))
    eps_c = _f32_const(b, eps, "hc_eps")
    rows, cols = b.const([-1], "hc_row_axis", "int64"), b.const([-2], "hc_column_axis", "int64")

    def normalized(comb: ir.Value, axis: ir.Value, name: str) -> ir.Value:
        total = b.op("Add", b.op("ReduceSum", comb, axis, keepdims=1), eps_c)
        return b.op("Div", comb, total, name=name)

    comb = b.op("Add", b.op("Softmax", square, axis=-1), eps_c, name="comb_softmax")
    comb = normalized(comb, cols, "comb_columns0")
    for i in range(1, iters):
        comb = normalized(normalized(comb, rows, f"comb_rows{i}"), cols, f"comb_columns{i}")
    return comb


def _pre_post(lc: LayerContext, streams: ir.Value, module: str) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """The block's input [B, S, H] (export dtype), its post weights [B, S, K, 1] (fp32) and, in the Sinkhorn
    form, comb [B, S, K, K] (fp32; None without it)."""
    b, dims, params = lc.b, lc.dims, lc.params
    hyper = dims.hyper
    assert hyper is not None
    k = hyper.streams
    mixed = hyper.sinkhorn_iters > 0
    counts = (k, k, k * k) if mixed else (k, k)
    fn = _f32(b, params, lc.name(f"{module}.fn", ""), lambda w: w.T)
    scale = _f32(b, params, lc.name(f"{module}.scale", ""), lambda s: np.repeat(s, counts))  # [2K (+ K^2)]
    base = _f32(b, params, lc.name(f"{module}.base", ""), lambda v: v)
    z = b.op("Add", b.op("Mul", _mixes(b, streams, fn, dims), scale), base)
    comb = None
    if mixed:
        sizes = b.const([2 * k, k * k], "hc_gates_comb_split", "int64")
        z, comb_logits = b.op_multi("Split", z, sizes, axis=-1, outputs=2)
        comb = _sinkhorn(b, comb_logits, k, hyper.eps, hyper.sinkhorn_iters)
    gates = _sigmoid(b, z, mixed)
    factors = _f32_const(b, np.array([1.0] * k + [hyper.magnitude] * k), "hc_post_magnitude")
    if mixed:  # DeepSeek-V4's post weights carry no eps
        offsets = _f32_const(b, np.array([hyper.eps] * k + [0.0] * k), "hc_pre_eps")
    else:
        offsets = _f32_const(b, hyper.eps, "hc_eps")
    weights = b.op("Add", b.op("Mul", gates, factors), offsets, name="weights")
    pre, post = pre_post_split(b, weights, k)
    x = _weighted_sum(b, streams, pre, params.dtype, dims.hidden_size)
    return x, b.op("Unsqueeze", post, b.const([-1], "last_axis", "int64"), name="post"), comb


def _spread(
    lc: LayerContext, streams: ir.Value, post: ir.Value, comb: ir.Value | None, y: ir.Value, name: str
) -> ir.Value:
    """copy_k + post_k * y, or with comb sum_j comb[j, k] copy_j + post_k * y, in fp32."""
    b = lc.b
    y = y if lc.params.dtype == F32 else b.op("Cast", y, to=F32)
    spread = b.op("Mul", post, b.op("Unsqueeze", y, b.const([2], "stream_axis", "int64")))
    if comb is not None:
        streams = b.op("Einsum", comb, streams, equation="bsjk,bsjh->bskh", name="mixed_copies")
    return b.op("Add", streams, spread, name=name)


INJECT_SCALE = 2.0  # Qwen4-Exp's injection weights are 2 sigmoid(...): a copy takes up to twice the block output


def copy_rms(b: GraphBuilder, streams: ir.Value, eps: float) -> ir.Value:
    """Each copy RMS-normed on its own, weightless [B, S, K, H] (Qwen4-Exp's group-wise RMSNorm, groups of H)."""
    mean = b.op("ReduceMean", b.op("Mul", streams, streams), b.const([-1], "channel_axis", "int64"), keepdims=1)
    inverse = b.op("Reciprocal", b.op("Sqrt", b.op("Add", mean, _f32_const(b, eps, "hc_norm_eps"))))
    return b.op("Mul", streams, inverse, name="copy_rms")


def mix_weights(b: GraphBuilder, flat: ir.Value, down: ir.Value, up: ir.Value, k: int, width: int) -> ir.Value:
    """sigmoid(up(silu(down(flat) / K))) as [B, S, K, H]: the low-rank map's weight of each copy's channels."""
    copies = _f32_const(b, float(k), "hc_count")
    low = b.op("Div", b.op("MatMul", flat, down), copies)
    hidden = b.op("Mul", low, b.op("Sigmoid", low), name="mix_silu")
    mix = b.op("Sigmoid", b.op("MatMul", hidden, up))
    return b.op("Reshape", mix, b.const([0, 0, k, width], "hc_copies_shape", "int64"), name="mix")


def _gated_mix(
    b: GraphBuilder, streams: ir.Value, name: Callable[[str], str], dims: ModelDims, params: Params, inject: bool
) -> tuple[ir.Value, ir.Value | None]:
    """Qwen4-Exp's block input [B, S, H] (export dtype) and, with `inject`, its injection weights [B, S, K, 1]
    (fp32); `name` maps a leaf module to its stored tensor."""
    hyper = dims.hyper
    assert hyper is not None
    k, width = hyper.streams, dims.hidden_size
    norm_weight = _f32(b, params, name("hc_norm"), lambda w: (1.0 + w).reshape(k, width))
    normed = b.op("Mul", copy_rms(b, streams, dims.rms_eps), norm_weight, name="hc_norm")  # [B, S, K, H]
    flat = b.op("Reshape", normed, b.const([0, 0, k * width], "hc_flat", "int64"))
    down = _f32(b, params, name("input_mix_weight_down"), lambda w: w.T)
    up = _f32(b, params, name("input_mix_weight_up"), lambda w: w.T)
    mix = mix_weights(b, flat, down, up, k, width)
    mixed = b.op("ReduceMean", b.op("Mul", mix, normed), b.const([2], "stream_axis", "int64"), keepdims=0)
    x = typed(mixed if params.dtype == F32 else b.op("Cast", mixed, to=params.dtype), params.dtype, [B, S, width])
    if not inject:
        return x, None
    logits = b.op("MatMul", flat, _f32(b, params, name("block_inject_weight"), lambda w: w.T))
    gates = b.op("Sigmoid", b.op("Div", logits, _f32_const(b, float(k), "hc_count")))
    weights = b.op("Mul", gates, _f32_const(b, INJECT_SCALE, "hc_inject_scale"), name="inject")
    return x, b.op("Unsqueeze", weights, b.const([-1], "last_axis", "int64"), name="post")


def _gated_pre_post(lc: LayerContext, streams: ir.Value, module: str) -> tuple[ir.Value, ir.Value, None]:
    """The gated form's block input and injection weights, as `_pre_post` returns its own (no comb)."""
    x, post = _gated_mix(lc.b, streams, lambda leaf: lc.name(f"{module}.{leaf}"), lc.dims, lc.params, inject=True)
    assert post is not None
    return x, post, None


def hyper_layer(
    lc: LayerContext, streams: ir.Value, block: Block, mlp: Mlp, norm: Norm
) -> tuple[ir.Value, LayerKV | None]:
    """A pre-norm layer on the copies: each block's input is the `pre`-weighted sum through the block's
    own norm, its output spread back by `post` (and the copies mixed by comb). `block` is the token mixer
    (its output projection included)."""
    names, L = lc.spec.hyper_connections, lc.spec.layer
    assert names is not None
    pre_post = _gated_pre_post if names.form == "gated" else _pre_post
    with lc.b.scope("hc_attn"):
        x, post, comb = pre_post(lc, streams, names.attention)
    y, kv = block(lc, norm(lc, x, L.input_norm, "input_layernorm"))
    streams = _spread(lc, streams, post, comb, y, "hc_residual_attn")
    with lc.b.scope("hc_mlp"):
        x, post, comb = pre_post(lc, streams, names.mlp)
    x = norm(lc, x, L.post_attention_norm, "post_attention_layernorm")
    with lc.b.scope("mlp"):
        y = mlp(lc, x, x)
    return _spread(lc, streams, post, comb, y, "hc_residual_mlp"), kv


def collapse_streams(b: GraphBuilder, streams: ir.Value, dims: ModelDims, spec: ArchSpec, params: Params) -> ir.Value:
    """[B, S, H]: the head's sigmoid-weighted sum of the copies (before the final norm); without a head
    (HyperConnectionNames.head empty) their plain mean."""
    names, hyper = spec.hyper_connections, dims.hyper
    assert names is not None and hyper is not None
    if names.form == "gated":  # Qwen4-Exp's final mixer: the block input of its gated form
        with b.scope("hc_head"):
            head = names.head[0]
            return _gated_mix(b, streams, lambda leaf: spec.tensor(f"{head}.{leaf}.weight"), dims, params, False)[0]
    if not names.head:  # GLM-5-Next's head: the unweighted mean of the copies (no stored map)
        with b.scope("hc_head"):
            mean = b.op("ReduceMean", streams, b.const([2], "stream_axis", "int64"), keepdims=0, name="mean_copies")
            out = mean if params.dtype == F32 else b.op("Cast", mean, to=params.dtype)
            return typed(out, params.dtype, [B, S, dims.hidden_size])
    spellings = [tuple(spec.tensor(head.format(leaf=leaf)) for leaf in ("fn", "scale", "base")) for head in names.head]
    fn_name, scale_name, base_name = next((s for s in spellings if s[0] in params.store), spellings[0])
    with b.scope("hc_head"):
        fn = _f32(b, params, fn_name, lambda w: w.T)
        scale = _f32(b, params, scale_name, lambda s: s)
        base = _f32(b, params, base_name, lambda v: v)
        z = b.op("Add", b.op("Mul", _mixes(b, streams, fn, dims), scale), base)
        gates = _sigmoid(b, z, hyper.sinkhorn_iters > 0)
        pre = b.op("Add", gates, _f32_const(b, hyper.eps, "hc_eps"), name="pre")
        return _weighted_sum(b, streams, pre, params.dtype, dims.hidden_size)
