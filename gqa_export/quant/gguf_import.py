"""A GGUF file's integer blocks moved into MatMulNBits, never re-rounded (docs/gguf.md §3).

Runs before the precision stage. Each linear layer whose weight is (a concatenation of) GGUF
weights with an exact form (source/gguf/blocks.py) becomes MatMulNBits nodes holding the file's
codes and scales as they are; types with per-block mins (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) have no
integer zero point, so their layer computes

    y = MatMulNBits(x; q, s, z) + blocksum(x) · rᵀ,   z = round(m / s),  r = s z - m

where blocksum(x) sums x over each block of K and m [N, K / block] are the file's mins: the same
weights, s (q - z) + r = s q - m, per block (`_Params`; docs/gguf.md §3.2). A
packed projection whose members differ in type (Q4_K_M keeps v_proj in Q6_K) becomes one node
per run of members of the same form, concatenated; a member without an exact form, or one that
`--precision int4` must re-quantize (an 8-bit form), stays a float MatMul the precision stage then
quantizes. The tied lm_head (Gemm on the embedding table) reads the table's blocks the same way;
the embedding Gather itself reads the table dequantized to float (exact). Stacked MoE experts go
through the pre-quantized MoE import (quant/imported_experts.py): QMoE where its CPU kernel is
exact (a form without mins), else per-expert MatMulNBits, a form with mins with the same
block-sum correction per expert (QMoE's integer zero points cannot hold r; docs/gguf.md §3.4).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.graph.params import NUMPY_DTYPES, Params, StreamedTensor, row_blocks
from gqa_export.quant.imported_experts import expert_linears, import_experts
from gqa_export.quant.quantize import PrecisionPlan, _linear_weight, _register, _replace
from gqa_export.source.gguf.blocks import BlockForm, zero_points_and_residual
from gqa_export.source.gguf.store import GgufLinear, GgufStore
from gqa_export.source.native import pack_fields

MS = "com.microsoft"


@dataclass
class GgufReport:
    """What each weight of the package is, from the file's point of view (manifest, notes, inspect)."""

    file: str = ""
    kept: dict[str, str] = field(default_factory=dict)  # HF weight -> "Q4_K: MatMulNBits 4-bit block 32 + mins"
    float_weights: dict[str, str] = field(default_factory=dict)  # HF weight -> its GGML type (read as float)
    requantized: dict[str, str] = field(default_factory=dict)  # HF weight -> type, re-quantized by --precision
    types: dict[str, str] = field(default_factory=dict)  # every HF tensor -> its GGML type

    def note(self, precision: str) -> str:
        ours = f"; {len(self.requantized)} re-quantized by --precision {precision}" if self.requantized else ""
        return (
            f"GGUF {self.file}: {len(self.kept)} weights keep the file's integer blocks (MatMulNBits, exact), "
            f"{len(self.float_weights)} are read as float{ours}"
        )

    def manifest(self, store: GgufStore) -> dict[str, object]:
        from gqa_export.source.gguf.blocks import EXACT_FLOAT_TYPES, FORMS

        tensors = {}
        for hf, m in sorted(store.mapped().items()):
            kind = self.types.get(hf, store.type_of(hf))
            form = FORMS.get(kind)
            gguf = m.gguf if m.interleaved is None else f"{m.gguf} + {m.interleaved}"  # gpt-oss's gate + up
            entry: dict[str, object] = {"gguf": gguf, "type": kind}
            if form is not None:
                entry["bits"] = form.source_bits
            if hf in self.kept:
                entry["as"] = self.kept[hf]
            elif hf in self.requantized:
                entry["as"] = f"dequantized exactly, re-quantized by --precision ({self.requantized[hf]})"
            else:  # MXFP4 (gpt-oss's experts): the values exactly, then --precision, as from its safetensors
                entry["as"] = "float (dequantized exactly)" if kind in EXACT_FLOAT_TYPES else "float"
            tensors[hf] = entry
        return {"source_format": "GGUF", "file": self.file, "architecture": store.file.architecture,
                "tensors": tensors}  # fmt: skip


def kept_bits(plan: PrecisionPlan) -> int:
    """The widest storage kept as it is: a float precision keeps every form (the activations follow
    it), int4 re-quantizes 8-bit forms, int8 keeps everything."""
    return 8 if plan.nbits is None else plan.nbits.bits


def _form_key(form: BlockForm) -> tuple[int, int, int, bool]:
    return (form.bits, form.block, form.offset, form.mins)


def import_gguf(model: ir.Model, store: GgufStore, plan: PrecisionPlan, report: GgufReport) -> None:
    """Replace each linear layer over GGUF integer blocks by MatMulNBits (module doc)."""
    report.file = store.file.path.name
    graph = model.graph
    sums: dict[tuple[str, int], ir.Value] = {}  # (activation value name, block) -> blocksum(x)
    for node in list(graph):
        if node.op_type == "MoE" and node.domain == MS:  # stacked experts of a form without mins: QMoE or per expert
            experts = expert_linears(store, node)  # type: ignore[arg-type]
            if experts is not None and all(m.bits <= kept_bits(plan) for m in experts.all):
                import_experts(model, node, experts, plan, report.kept)
            continue
        table = _gathered_table(node, store)
        if table is not None:  # the embedding: the same blocks through GatherBlockQuantized
            lin = store.linear(table)
            # an untied table keeps its blocks at any precision (a lookup: exact and smaller than float);
            # a tied one follows the lm_head it shares them with
            tied = any(use.node.op_type == "Gemm" for use in node.inputs[0].uses())  # type: ignore[union-attr]
            if lin is not None and (not tied or lin.form.bits <= kept_bits(plan)):
                _gather(model, node, lin, plan, f"{table.removesuffix('.weight')}.gguf")
                report.kept[table] = _how(lin.form) + " (and GatherBlockQuantized)"
            elif lin is not None:
                report.requantized[table] = lin.form.type_name
            continue
        weight = _linear_weight(node)
        if weight is None:
            continue
        found = _sources(node, weight, store)
        if not found:
            continue
        sources = [name for name, _ in found]
        linears = [store.linear(name, selected) for name, selected in found]
        keep = [lin if lin is not None and lin.form.bits <= kept_bits(plan) else None for lin in linears]
        for name, lin, kept in zip(sources, linears, keep, strict=True):
            if kept is None and lin is not None:
                report.requantized[name] = lin.form.type_name
        if all(k is None for k in keep):
            continue
        base = str(weight.name).removesuffix(".weight")  # a tied lm_head shares the table's tensors
        _split(model, node, base, sources, keep, plan, sums, report)
    for name in store.names():
        report.types[name] = store.type_of(name)
        if name not in report.kept and name not in report.requantized:
            report.float_weights[name] = store.type_of(name)
    for name, value in list(graph.initializers.items()):
        if not value.uses() and value not in graph.outputs:
            del graph.initializers[name]


def _sources(node: ir.Node, weight: ir.Value, store: GgufStore) -> list[tuple[str, np.ndarray | None]]:
    """The HF weights behind a linear layer, each with the HF rows it takes (None: all, in order): a
    MatMul's streamed sources, one weight's selected rows (a fused qkv taken q | k | v) or one
    weight stored [in, out] (GPT-2's Conv1D, whose file rows are MatMulNBits' [N, K] as they are),
    or the table of a tied Gemm."""
    tensor = weight.const_value
    if node.op_type == "MatMul" and isinstance(tensor, StreamedTensor):
        if tensor.sources:
            return [(s, None) for s in tensor.sources] if all(s in store for s in tensor.sources) else []
        if tensor.selected is not None and tensor.selected[0] in store:
            return [tensor.selected]
        if tensor.stored is not None and tensor.stored in store:
            return [(tensor.stored, None)]
    if node.op_type == "Gemm" and weight.name in store:  # the tied lm_head: Gemm(x, E, transB=1)
        return [(str(weight.name), None)]
    return []


def _split(
    model: ir.Model,
    node: ir.Node,
    base: str,
    sources: list[str],
    keep: list[GgufLinear | None],
    plan: PrecisionPlan,
    sums: dict[tuple[str, int], ir.Value],
    report: GgufReport,
) -> None:
    """One node per run of members of the same form (float members: one float MatMul), concatenated."""
    x = node.inputs[0]
    assert x is not None
    runs: list[tuple[object, list[int]]] = []
    for i, lin in enumerate(keep):
        key = _form_key(lin.form) if lin is not None else None
        if runs and runs[-1][0] == key:
            runs[-1][1].append(i)
        else:
            runs.append((key, [i]))
    nodes: list[ir.Node] = []
    outputs: list[ir.Value] = []
    for j, (key, members) in enumerate(runs):
        tag = f"{base}.gguf{j}" if len(runs) > 1 else f"{base}.gguf"
        if key is None:
            names = [sources[i] for i in members]
            floats = Params(keep_store(keep, sources), plan.io_dtype).matmul_weight(names)
            w = _register(model.graph, f"{tag}.weight", floats)
            mm = ir.Node("", "MatMul", [x, w], name=f"{tag}/MatMul", num_outputs=1)
            nodes.append(mm)
            outputs.append(mm.outputs[0])
            continue
        run = [keep[i] for i in members]
        made, out = _nbits(model, x, [lin for lin in run if lin is not None], plan, sums, tag)
        nodes += made
        outputs.append(out)
        for lin in run:
            assert lin is not None
            report.kept.setdefault(lin.name, _how(lin.form))
    if len(outputs) > 1:
        nodes.append(ir.Node("", "Concat", outputs, attributes=[ir.AttrInt64("axis", -1)], name=f"{base}/concat"))
    _replace(model, node, nodes)


def keep_store(keep: list[GgufLinear | None], sources: list[str]) -> GgufStore:
    """The store behind a node's members (every member comes from the same store)."""
    for lin in keep:
        if lin is not None:
            return lin.store
    raise AssertionError(f"no GGUF member among {sources}")


class _Params:
    """One run's scales, zero points and residual mins, decoded once when first written (codes
    stream separately). A form with mins means w = s q - m per block; it is held as
    w = s (q - z) + r with z = round(m / s) clipped to the codes' range (the op's integer zero
    point) and r = s z - m: the MatMulNBits term carries nearly all of w, and the block-sum
    correction only the residual |r| <= s / 2 (a correction carrying all of m cancels: summed
    separately, s q and m are each larger than w, and the float error grows with them)."""

    def __init__(self, run: list[GgufLinear]) -> None:
        self.run = run
        self.form = run[0].form
        self._scales: np.ndarray | None = None
        self._zero_points: np.ndarray | None = None
        self._residual: np.ndarray | None = None

    def _decode(self) -> None:
        scales, mins = [], []
        for lin in self.run:
            for a, b in row_blocks(lin.n, lin.k * 4):
                _, s, m = lin.decoded(a, b)
                scales.append(s)
                mins.append(m)
            lin.store.release(lin.name)
        s = np.concatenate(scales)
        self._scales = s
        if mins[0] is None:
            return
        self._zero_points, self._residual = zero_points_and_residual(self.form, s, np.concatenate(mins))

    def scales(self) -> np.ndarray:
        if self._scales is None:
            self._decode()
        assert self._scales is not None
        return self._scales

    def zero_points(self) -> np.ndarray:
        """uint8 [N, K / block]: the form's offset, or per block round(m / s) for a form with mins."""
        if self._scales is None:
            self._decode()
        if self._zero_points is None:
            return np.full(self.scales().shape, self.form.offset, np.uint8)
        return self._zero_points

    def residual(self) -> np.ndarray:
        if self._scales is None:
            self._decode()
        assert self._residual is not None
        return self._residual


def _how(form: BlockForm) -> str:
    return f"{form.type_name}: MatMulNBits {form.bits}-bit block {form.block}" + (" + mins" if form.mins else "")


def _gathered_table(node: ir.Node, store: GgufStore) -> str | None:
    """The GGUF table behind an embedding Gather(E, ids), or None."""
    if node.op_type != "Gather" or node.domain != "" or node.attributes.get_int("axis", 0) != 0:
        return None
    table = node.inputs[0]
    return str(table.name) if table is not None and table.name in store else None


def _blocks(graph: ir.Graph, run: list[GgufLinear], params: _Params, dtype: ir.DataType, tag: str) -> list[ir.Value]:
    """The codes [N, K / block, block * bits / 8] and scales [N, K / block] of a run of one form,
    registered once under `tag` (a tied table's Gather and lm_head read the same two tensors)."""
    form = run[0].form
    n, k, bits, bs = sum(lin.n for lin in run), run[0].k, form.bits, form.block
    kb, blob = k // bs, bs * bits // 8
    numpy_dtype = NUMPY_DTYPES[dtype]

    def codes() -> Iterator[np.ndarray]:
        for lin in run:
            for a, b in row_blocks(lin.n, lin.k):
                q, _, _ = lin.decoded(a, b)
                yield pack_fields(q, bits).reshape(b - a, kb, blob)
            lin.store.release(lin.name)

    scales = ir.LazyTensor(lambda: ir.Tensor(params.scales().astype(numpy_dtype)), dtype=dtype, shape=ir.Shape([n, kb]))
    return [
        _register(graph, f"{tag}.qweight", StreamedTensor(codes, ir.DataType.UINT8, (n, kb, blob))),
        _register(graph, f"{tag}.scales", scales),
    ]


def _nbits(
    model: ir.Model,
    x: ir.Value,
    run: list[GgufLinear],
    plan: PrecisionPlan,
    sums: dict[tuple[str, int], ir.Value],
    tag: str,
) -> tuple[list[ir.Node], ir.Value]:
    """MatMulNBits over a run of members of one form, plus its min correction when the form has mins."""
    graph, form = model.graph, run[0].form
    n, k, bits, bs = sum(lin.n for lin in run), run[0].k, form.bits, form.block
    kb = k // bs
    dtype = NUMPY_DTYPES[plan.io_dtype]
    params = _Params(run)
    inputs = _blocks(graph, run, params, plan.io_dtype, tag)
    if form.mins or form.offset != 1 << (bits - 1):  # the op's default zero point is 2^(bits-1)
        zp_cols = (kb * bits + 7) // 8

        def zero_points() -> ir.TensorProtocol:
            return ir.Tensor(np.ascontiguousarray(pack_fields(params.zero_points(), bits)))

        zp = ir.LazyTensor(zero_points, dtype=ir.DataType.UINT8, shape=ir.Shape([n, zp_cols]))
        inputs.append(_register(graph, f"{tag}.zero_points", zp))
    attrs = ir.convenience.convert_attributes(
        {"K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": plan.accuracy_level}
    )
    mm = ir.Node(MS, "MatMulNBits", [x, *inputs], attributes=attrs, name=f"{tag}/MatMulNBits", num_outputs=1)
    if not form.mins:
        return [mm], mm.outputs[0]
    made: list[ir.Node] = [mm]
    key = (str(x.name), bs)
    summed = sums.get(key)
    if summed is None:
        made_sum, summed = _block_sums(graph, x, kb, bs, tag)
        made += made_sum
        sums[key] = summed
    residual_t = ir.LazyTensor(
        lambda: ir.Tensor(np.ascontiguousarray(params.residual().T.astype(dtype))),
        dtype=plan.io_dtype,
        shape=ir.Shape([kb, n]),
    )
    residual = _register(graph, f"{tag}.residual_mins", residual_t)
    correction = ir.Node("", "MatMul", [summed, residual], name=f"{tag}/residual_mins", num_outputs=1)
    out = ir.Node("", "Add", [mm.outputs[0], correction.outputs[0]], name=f"{tag}/plus_residual", num_outputs=1)
    return [*made, correction, out], out.outputs[0]


def _gather(model: ir.Model, node: ir.Node, lin: GgufLinear, plan: PrecisionPlan, tag: str) -> None:
    """Gather(E, ids) -> GatherBlockQuantized over E's blocks ([V, K / block, blob], quantize_axis
    2), zero points unpacked one a block, plus Gather(r)[ids] per block for a form with mins: each
    embedding element s (q - z) + r, as the lm_head computes it. Output reshaped to [..., K]."""
    graph, form = model.graph, lin.form
    n, k, bits, bs = lin.n, lin.k, form.bits, form.block
    kb = k // bs
    params = _Params([lin])
    dtype = NUMPY_DTYPES[plan.io_dtype]
    qweight, scales = _blocks(graph, [lin], params, plan.io_dtype, tag)
    shape3 = _register(graph, f"{tag}.scales_shape3", ir.Tensor(np.array([n, kb, 1], np.int64)))
    scales3 = ir.Node("", "Reshape", [scales, shape3], name=f"{tag}/scales3d", num_outputs=1)
    ids = node.inputs[1]
    assert ids is not None
    inputs = [qweight, ids, scales3.outputs[0]]
    if form.mins or form.offset != 1 << (bits - 1):
        zp = ir.LazyTensor(lambda: ir.Tensor(np.ascontiguousarray(params.zero_points()[:, :, None])),
                           dtype=ir.DataType.UINT8, shape=ir.Shape([n, kb, 1]))  # fmt: skip
        inputs.append(_register(graph, f"{tag}.gather_zero_points", zp))
    attrs = ir.convenience.convert_attributes({"gather_axis": 0, "quantize_axis": 2, "block_size": bs, "bits": bits})
    gathered = ir.Node(MS, "GatherBlockQuantized", inputs, attributes=attrs, name=f"{tag}/Gather", num_outputs=1)
    nodes = [scales3, gathered]
    out = gathered.outputs[0]
    if form.mins:
        residual = ir.LazyTensor(lambda: ir.Tensor(np.ascontiguousarray(params.residual().astype(dtype))),
                                 dtype=plan.io_dtype, shape=ir.Shape([n, kb]))  # fmt: skip
        rows = ir.Node("", "Gather", [_register(graph, f"{tag}.gather_residual", residual), ids],
                       name=f"{tag}/residual_rows", num_outputs=1)  # fmt: skip
        axes = _register(graph, "gguf.last_axis", ir.Tensor(np.array([-1], np.int64)))
        per_block = ir.Node("", "Unsqueeze", [rows.outputs[0], axes], name=f"{tag}/residual_blocks", num_outputs=1)
        added = ir.Node("", "Add", [out, per_block.outputs[0]], name=f"{tag}/plus_residual_rows", num_outputs=1)
        nodes += [rows, per_block, added]
        out = added.outputs[0]
    flat = _register(graph, f"{tag}.gather_shape", ir.Tensor(np.array([0, 0, k], np.int64)))
    nodes.append(ir.Node("", "Reshape", [out, flat], name=f"{tag}/to_hidden", num_outputs=1))
    _replace(model, node, nodes)


def _block_sums(graph: ir.Graph, x: ir.Value, kb: int, bs: int, tag: str) -> tuple[list[ir.Node], ir.Value]:
    """blocksum(x) [..., kb]: x [..., K] reshaped to [..., kb, bs] and summed over the block."""
    lead = ir.Node("", "Shape", [x], attributes=[ir.AttrInt64("end", -1)], name=f"{tag}/lead", num_outputs=1)
    tail = _register(graph, f"gguf.block_shape.{kb}x{bs}", ir.Tensor(np.array([kb, bs], np.int64)))
    shape = ir.Node("", "Concat", [lead.outputs[0], tail], attributes=[ir.AttrInt64("axis", 0)],
                    name=f"{tag}/block_shape", num_outputs=1)  # fmt: skip
    blocks = ir.Node("", "Reshape", [x, shape.outputs[0]], name=f"{tag}/blocks", num_outputs=1)
    axes = _register(graph, "gguf.last_axis", ir.Tensor(np.array([-1], np.int64)))
    summed = ir.Node("", "ReduceSum", [blocks.outputs[0], axes], attributes=[ir.AttrInt64("keepdims", 0)],
                     name=f"{tag}/block_sums", num_outputs=1)  # fmt: skip
    return [lead, shape, blocks, summed], summed.outputs[0]
