"""Pre-quantized MoE experts moved into QMoE, or into per-expert MatMulNBits, never re-rounded.

GPTQ, AWQ, compressed-tensors and Quark store each expert as three quantized Linears
(`experts.{e}.gate_proj` / `up_proj` / `down_proj`, Mixtral's `w1` / `w3` / `w2`). The MoE node the
graph builds for them (graph/moe.py) is replaced here, before the precision stage, by one of two
exact forms (docs/prequantized.md §7):
- **QMoE** when its layout holds the checkpoint's integers and scales as they are and its CPU kernel
  computes them exactly (probed, docs/prequantized.md §7.1): one bit width for every expert matrix,
  no input permutation on gate/up, and 4-bit (per channel or any block from 16), 8-bit per channel,
  or 2-bit per channel / block 16. A down_proj act-order permutation costs nothing: the gate/up
  output rows are reordered by it, so down's input arrives permuted.
- **per-expert MatMulNBits** otherwise (act-order gate/up, block-wise 8-bit, 2-bit blocks >= 32):
  each expert runs on the tokens routed to it, reading `Gather(x, perm_e)`, weighted by the op's own
  routing. Exact; its cost against the fused op is measured in docs/prequantized.md §7.3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.params import NUMPY_DTYPES, StreamedTensor
from gqa_export.quant.quantize import PrecisionPlan, _register, _replace
from gqa_export.source.imported import ImportedStore
from gqa_export.source.native import NativeLinear, pack_fields

MS = "com.microsoft"


@dataclass
class Experts:
    """One MoE layer's quantized expert linears, expert by expert."""

    gate: list[NativeLinear]
    up: list[NativeLinear]
    down: list[NativeLinear]

    @property
    def all(self) -> list[NativeLinear]:
        return [*self.gate, *self.up, *self.down]

    def channels(self, e: int) -> np.ndarray | None:
        """The order of expert e's intermediate channels: down_proj's act-order permutation (or None)."""
        return self.down[e].perm


def expert_linears(store: ImportedStore, node: ir.Node) -> Experts | None:
    """The checkpoint's quantized linears behind a MoE node's fc1/fc2, or None when they are float."""
    fc1 = node.inputs[2]
    tensor = fc1.const_value if fc1 is not None else None
    layout = getattr(tensor, "experts", None) if isinstance(tensor, StreamedTensor) else None
    if layout is None or not getattr(layout, "per_expert", None):
        return None
    found = [[store.native(t.format(e=e)) for e in range(layout.count)] for t in layout.per_expert]
    if any(m is None for ms in found for m in ms):
        return None
    return Experts(*found)  # type: ignore[arg-type]


def qmoe_block(experts: Experts) -> int | None:
    """QMoE's block size for these experts (0: per channel), or None when QMoE cannot hold them
    exactly on CPU (docs/prequantized.md §7.1)."""
    members = experts.all
    bits = members[0].bits
    if any(m.bits != bits for m in members) or any(m.perm is not None for m in [*experts.gate, *experts.up]):
        return None
    if any(m.block_residual() is not None for m in members):  # a GGUF min's remainder: no QMoE term for it
        return None
    if all(m.group == m.k for m in members):
        return 0
    if bits == 8:  # block-wise int8 runs on int8 activations: ~1 % off
        return None
    block = 16 if bits == 2 else min(m.block_size for m in members)  # 2-bit blocks >= 32: ~1 % off
    if any(m.group % block or m.k % block for m in members):
        return None
    return block


def import_experts(
    model: ir.Model, node: ir.Node, experts: Experts, plan: PrecisionPlan, weights: dict[str, str]
) -> None:
    """Replace the MoE node by QMoE, or by per-expert MatMulNBits (module doc); `weights` records
    how each checkpoint weight was imported."""
    block = qmoe_block(experts)
    if block is not None:
        _to_qmoe(model, node, experts, block, plan)
        form = "QMoE"
    else:
        _to_expert_nodes(model, node, experts, plan)
        form = "per-expert MatMulNBits"
    for m in experts.all:
        how = f"{m.fmt} {m.bits}-bit group {m.group}" + (" act-order" if m.perm is not None else "")
        weights[m.name] = how + (" symmetric" if m.symmetric else "") + f" ({form})"


# --- the fused form ---------------------------------------------------------------------------------
def _scales(m: NativeLinear, block: int) -> np.ndarray:
    """float32 [N, K / block] (block 0: [N], one scale per output channel)."""
    scales = m.params()[0]
    return scales[:, 0] if block == 0 else np.repeat(scales, m.group // block, axis=1)


def _zero_points(m: NativeLinear, block: int) -> np.ndarray:
    """uint8 [N, K / block] ([N] for block 0), the default 2^(bits-1) where symmetric."""
    z = m.params()[1]
    if z is None:
        z = np.full((m.n, m.k // m.group), 1 << (m.bits - 1), np.uint8)
    return z[:, 0] if block == 0 else np.repeat(z, m.group // block, axis=1)


def _interleaved(gate: np.ndarray, up: np.ndarray, channels: np.ndarray | None) -> np.ndarray:
    """fc1's rows: gate_c, up_c for each intermediate channel c in `channels` order (docs/moe.md §3)."""
    if channels is not None:
        gate, up = gate[channels], up[channels]
    return np.stack([gate, up], axis=1).reshape(2 * gate.shape[0], *gate.shape[1:])


def _to_qmoe(model: ir.Model, node: ir.Node, experts: Experts, block: int, plan: PrecisionPlan) -> None:
    graph, dtype = model.graph, NUMPY_DTYPES[plan.io_dtype]
    count, first = len(experts.gate), experts.gate[0]
    bits, hidden, inter = first.bits, first.k, first.n
    base = (node.inputs[2].name or "experts").removesuffix(".fc1")  # type: ignore[union-attr]

    def weights(tag: str, n: int, k: int) -> ir.Value:
        def whole(m: NativeLinear) -> np.ndarray:
            return m.packed_rows(0, m.n).reshape(m.n, -1)

        def blocks() -> Iterator[np.ndarray]:
            for e in range(count):
                if tag == "fc1":
                    yield _interleaved(whole(experts.gate[e]), whole(experts.up[e]), experts.channels(e))
                else:
                    yield whole(experts.down[e])
                for m in (experts.gate[e], experts.up[e]) if tag == "fc1" else (experts.down[e],):
                    m.store.release(m.name)

        packed = StreamedTensor(blocks, ir.DataType.UINT8, (count, n, k * bits // 8))
        return _register(graph, f"{base}.{tag}.qweight", packed)

    def per_expert(tag: str, read: Callable[[NativeLinear], np.ndarray]) -> np.ndarray:
        if tag == "fc1":
            return np.stack([_interleaved(read(experts.gate[e]), read(experts.up[e]), experts.channels(e))
                             for e in range(count)])  # fmt: skip
        return np.stack([read(m) for m in experts.down])

    def scales(tag: str, n: int, k: int) -> ir.Value:
        shape = [count, n] if block == 0 else [count, n, k // block]
        lazy = ir.LazyTensor(lambda: ir.Tensor(per_expert(tag, lambda m: _scales(m, block)).astype(dtype)),
                             dtype=plan.io_dtype, shape=ir.Shape(shape))  # fmt: skip
        return _register(graph, f"{base}.{tag}.scales", lazy)

    def zero_points(tag: str, n: int, k: int) -> ir.Value | None:
        members = [*experts.gate, *experts.up] if tag == "fc1" else experts.down
        if all(m.symmetric for m in members):
            return None  # the default 2^(bits-1): same values, faster kernel
        shape = [count, (n * bits + 7) // 8] if block == 0 else [count, n, ((k // block) * bits + 7) // 8]

        def packed() -> ir.TensorProtocol:  # per channel: packed along N; else along the blocks
            return ir.Tensor(np.ascontiguousarray(pack_fields(per_expert(tag, lambda m: _zero_points(m, block)), bits)))

        lazy = ir.LazyTensor(packed, dtype=ir.DataType.UINT8, shape=ir.Shape(shape))
        return _register(graph, f"{base}.{tag}.zero_points", lazy)

    given = [*node.inputs, *[None] * (6 - len(node.inputs))]
    attrs = {k: a.value for k, a in node.attributes.items()}
    new_nodes: list[ir.Node] = []
    router_weights = None
    if not attrs.get("normalize_routing_weights", 0):  # QMoE alone always renormalizes (docs/moe.md §4)
        softmax = ir.Node("", "Softmax", [given[1]], attributes=ir.convenience.convert_attributes({"axis": -1}),
                          name=f"{node.name}/router_weights", num_outputs=1)  # fmt: skip
        new_nodes.append(softmax)
        router_weights = softmax.outputs[0]
    attrs.update(expert_weight_bits=bits, accuracy_level=plan.accuracy_level)
    if block:
        attrs["block_size"] = block
    fc1 = (weights("fc1", 2 * inter, hidden), scales("fc1", 2 * inter, hidden))
    fc2 = (weights("fc2", hidden, inter), scales("fc2", hidden, inter))
    qmoe = ir.Node(
        MS, "QMoE",
        [given[0], given[1], *fc1, given[3], *fc2, given[5], None, None, None,
         zero_points("fc1", 2 * inter, hidden), zero_points("fc2", hidden, inter), None, router_weights],
        attributes=ir.convenience.convert_attributes(attrs), name=f"{node.name}Q", num_outputs=1,
    )  # fmt: skip
    _replace(model, node, [*new_nodes, qmoe])


# --- the per-expert form ----------------------------------------------------------------------------
class _Nodes:
    """A small node list builder for the replacement subgraph."""

    def __init__(self, graph: ir.Graph, prefix: str, dtype: np.dtype) -> None:
        self.graph, self.prefix, self.dtype, self.nodes = graph, prefix, dtype, []

    def op(self, op: str, *inputs: ir.Value | None, domain: str = "", outputs: int = 1, **attrs) -> ir.Value:
        node = ir.Node(domain, op, list(inputs), attributes=ir.convenience.convert_attributes(attrs),
                       name=f"{self.prefix}/{op}_{len(self.nodes)}", num_outputs=outputs)  # fmt: skip
        self.nodes.append(node)
        return node.outputs[0] if outputs == 1 else node.outputs  # type: ignore[return-value]

    def const(self, name: str, value: np.ndarray) -> ir.Value:
        return _register(self.graph, f"{self.prefix}.{name}", ir.Tensor(np.asarray(value)))


def _matmul_nbits(
    b: _Nodes,
    x: ir.Value,
    name: str,
    parts: list[NativeLinear],
    order: np.ndarray | None,
    plan: PrecisionPlan,
    permuted: bool = False,
) -> ir.Value:
    """One MatMulNBits over `parts` concatenated along N, each part's rows in `order` (or as stored);
    x is gathered by the parts' act-order permutation unless it arrives `permuted` already."""
    first = parts[0]
    for other in parts[1:]:
        same_perm = (first.perm is None and other.perm is None) or (
            first.perm is not None and other.perm is not None and np.array_equal(first.perm, other.perm)
        )
        if (other.bits, other.block_size, other.k) != (first.bits, first.block_size, first.k) or not same_perm:
            raise InputError(
                f"{first.prefix} and {other.prefix} read the same input but were quantized differently ({first.fmt}: "
                "bits, group size or act-order permutation); gqa-export cannot import such experts: export the "
                "float checkpoint"
            )
    bits, bs, k = first.bits, first.block_size, first.k
    n, kb = sum(m.n for m in parts), first.k_blocks  # a last block padded where K is not whole blocks

    def ordered(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

    def blocks() -> Iterator[np.ndarray]:
        for m in parts:
            yield ordered(m.packed_rows(0, m.n))
            m.store.release(m.name)

    def scales() -> ir.TensorProtocol:
        return ir.Tensor(np.concatenate([ordered(m.block_scales()) for m in parts]).astype(b.dtype))

    def zero_points() -> ir.TensorProtocol:
        return ir.Tensor(pack_fields(np.concatenate([ordered(m.block_zero_points()) for m in parts]), bits))

    graph = b.graph
    inputs = [
        _register(graph, f"{name}.qweight", StreamedTensor(blocks, ir.DataType.UINT8, (n, kb, bs * bits // 8))),
        _register(graph, f"{name}.scales", ir.LazyTensor(scales, dtype=plan.io_dtype, shape=ir.Shape([n, kb]))),
    ]
    if not all(m.symmetric for m in parts):
        zp = ir.LazyTensor(zero_points, dtype=ir.DataType.UINT8, shape=ir.Shape([n, (kb * bits + 7) // 8]))
        inputs.append(_register(graph, f"{name}.zero_points", zp))
    if first.perm is not None and not permuted:
        x = _permuted_input(b, x, name, first.perm)
    y = b.op("MatMulNBits", x, *inputs, domain=MS, K=k, N=n, bits=bits, block_size=bs,
             accuracy_level=plan.accuracy_level)  # fmt: skip
    if first.block_residual() is None:
        return y

    def residual() -> ir.TensorProtocol:  # r [N, K / block] in y's order, transposed: decoded when written
        r = np.concatenate([ordered(m.block_residual()) for m in parts])
        return ir.Tensor(np.ascontiguousarray(r.T.astype(b.dtype)))

    lazy = ir.LazyTensor(residual, dtype=plan.io_dtype, shape=ir.Shape([kb, n]))
    return _plus_residual(b, x, y, name, lazy, bs)


def _plus_residual(b: _Nodes, x: ir.Value, y: ir.Value, name: str, residual: ir.LazyTensor, bs: int) -> ir.Value:
    """y + blocksum(x) · rᵀ: a GGUF min's remainder r per block (docs/gguf.md §3.2). blocksum(x)
    [M, K / bs] is x times a 0/1 block indicator [K, K / bs] (one per shape, shared): a Reshape +
    ReduceSum would do, but onnxruntime 1.31's CPU ReduceSum returns an empty input unreduced,
    and an expert no token chose has M = 0."""
    kb = residual.shape[0]
    indicator = (np.arange(kb * bs)[:, None] // bs == np.arange(kb)[None, :]).astype(b.dtype)
    ones = _register(b.graph, f"gguf.block_indicator.{kb}x{bs}", ir.Tensor(indicator))
    sums = b.op("MatMul", x, ones)
    return b.op("Add", y, b.op("MatMul", sums, _register(b.graph, f"{name}.residual_mins", residual)))


def _permuted_input(b: _Nodes, x: ir.Value, name: str, perm: np.ndarray) -> ir.Value:
    """Act-order: this expert's node reads x[..., perm] (docs/prequantized.md §3.3)."""
    index = _register(b.graph, f"{name}.input_permutation", ir.Tensor(perm.astype(np.int64)))
    return b.op("Gather", x, index, axis=-1)


def _routing_weights(b: _Nodes, logits: ir.Value, k: int, normalize: bool) -> ir.Value:
    """MoE's routing as dense weights [T, E]: softmax over all experts, the top k (renormalized
    when the node asks), zero elsewhere (docs/moe.md §4)."""
    probs = b.op("Softmax", logits, axis=-1)
    top, chosen = b.op("TopK", probs, b.const("k", np.array([k], np.int64)), axis=-1, outputs=2)
    if normalize:
        top = b.op("Div", top, b.op("ReduceSum", top, b.const("last", np.array([-1], np.int64)), keepdims=1))
    zeros = b.op("Mul", probs, b.const("zero", np.zeros((), b.dtype)))
    return b.op("ScatterElements", zeros, chosen, top, axis=-1)


def _to_expert_nodes(model: ir.Model, node: ir.Node, experts: Experts, plan: PrecisionPlan) -> None:
    """Each expert on the tokens routed to it, weighted by MoE's routing: softmax over all experts,
    top k, renormalized when the node asks (docs/moe.md §4), as dense weights [T, E]; expert e takes
    the rows whose weight is > 0 (NonZero + GatherND, none at all when no token chose it), and one
    ScatterND adds the weighted outputs back into [T, H]."""
    dtype = NUMPY_DTYPES[plan.io_dtype]
    attrs = {k: a.value for k, a in node.attributes.items()}
    base = (node.inputs[2].name or "experts").removesuffix(".fc1")  # type: ignore[union-attr]
    b = _Nodes(model.graph, base, dtype)
    x, logits = node.inputs[0], node.inputs[1]
    assert x is not None and logits is not None
    zero = b.const("zero", np.zeros((), dtype))
    last = b.const("last", np.array([-1], np.int64))
    dense = _routing_weights(b, logits, int(attrs.get("k", 1)), bool(attrs.get("normalize_routing_weights", 0)))
    alpha, beta = float(attrs.get("activation_alpha", 1.0)), float(attrs.get("activation_beta", 0.0))
    limit = attrs.get("swiglu_limit")
    inter = experts.gate[0].n
    outputs, rows = [], []
    for e in range(len(experts.gate)):
        weight = b.op("Gather", dense, b.const(f"{e}.index", np.asarray(e, np.int64)), axis=1)  # [T]
        routed = b.op("Transpose", b.op("NonZero", b.op("Greater", weight, zero)), perm=[1, 0])  # [M, 1]
        xe = b.op("GatherND", x, routed)  # [M, H]
        channels = experts.channels(e)  # down's act-order folded into gate/up's output rows (free)
        h = _matmul_nbits(b, xe, f"{base}.{e}.gate_up", [experts.gate[e], experts.up[e]], channels, plan)
        gate, up = b.op("Split", h, b.const("halves", np.array([inter, inter], np.int64)), axis=-1, outputs=2)
        if limit is not None:  # the schema's clamps (docs/moe.md §1.1)
            gate = b.op("Min", gate, b.const("limit", np.asarray(limit, dtype)))
            lower, upper = (b.const(n, np.asarray(v, dtype)) for n, v in (("lower", -limit), ("upper", limit)))
            up = b.op("Clip", up, lower, upper)
        scaled = gate if alpha == 1.0 else b.op("Mul", gate, b.const("alpha", np.asarray(alpha, dtype)))
        act = b.op("Mul", gate, b.op("Sigmoid", scaled))
        if beta != 0.0:
            up = b.op("Add", up, b.const("beta", np.asarray(beta, dtype)))
        y = _matmul_nbits(b, b.op("Mul", act, up), f"{base}.{e}.down", [experts.down[e]], None, plan, permuted=True)
        outputs.append(b.op("Mul", y, b.op("Unsqueeze", b.op("GatherND", weight, routed), last)))
        rows.append(routed)
    every = b.op("Concat", *outputs, axis=0)  # [T*k, H]
    start = b.op("Mul", x, zero)
    if plan.io_dtype != ir.DataType.FLOAT:  # the CPU ScatterND adds float32 only (probed): sum in fp32
        every, start = (b.op("Cast", v, to=ir.DataType.FLOAT) for v in (every, start))
    total = b.op("ScatterND", start, b.op("Concat", *rows, axis=0), every, reduction="add")
    if plan.io_dtype != ir.DataType.FLOAT:
        b.op("Cast", total, to=plan.io_dtype)
    _replace(model, node, b.nodes)
