"""Stage 4: weight precision.

Float precisions (fp32/fp16/bf16) are applied while weights stream: the graph's activation dtype
is fixed when it is built, and `graph.params.Params` casts each lazy tensor as it is written, so
no float copy of the model ever exists. This stage checks that every float initializer has the
planned dtype.

int4/int8 replace every linear layer (MatMul with a constant 2-D weight, and the tied lm_head's
Gemm) by `com.microsoft.MatMulNBits`. The quantized weight is again a streamed tensor: when it
is written, rows of the float weight are read from the checkpoint (or the package being
re-quantized), quantized with `nbits` and written, a block at a time, so memory stays at one
block. Packed QKV / gate-up weights are one matrix and quantize as one.

Which (EP, precision) pairs run was checked against ORT's kernel registrations
(docs/ort-ops.md §1.3, §4.1): GroupQueryAttention has CPU kernels for fp32 and fp16 (no bf16) and
CUDA kernels for fp16 and bf16 (no fp32). int4/int8 keep fp32 activations on CPU (MatMulNBits with
accuracy_level 4 runs int8 compute there) and fp16 activations on CUDA.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import onnx_ir as ir

from gqa_export.choices import ACTIVATIONS, QUANT_METHODS, SUPPORTED, WHY_NOT, listing
from gqa_export.eps import EPS
from gqa_export.errors import InputError
from gqa_export.graph.params import NUMPY_DTYPES, WIDER_THAN_IO_META, StreamedTensor, row_blocks
from gqa_export.quant.mixed import parse_mixed, weight_bits
from gqa_export.quant.nbits import NBitsConfig, dequantize, quantize_rows
from gqa_export.quant.options import QuantOptions, refuse_on_float
from gqa_export.quant.tables import float_gather, kept_float_table, quantized_table

FLOAT_DTYPES = {"fp32": ir.DataType.FLOAT, "fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
INT_BITS = {"int4": 4, "int8": 8}
# ir.Value.meta key: the _Quantized behind a packed weight
QUANTIZATION_META = "gqa_export.quantization"


@dataclass(frozen=True)
class PrecisionPlan:
    name: str
    io_dtype: ir.DataType  # activations, KV cache and float weights
    logits_dtype: ir.DataType
    nbits: NBitsConfig | None = None
    accuracy_level: int = 0
    keep_float: tuple[str, ...] = ()
    quantize_embeddings: bool = False
    mixed: tuple[tuple[str, int], ...] = ()  # (selector or name pattern, bits), later entries win
    # why the tables quantized by default (tied, per-layer) keep a float Gather: the EP has no
    # GatherBlockQuantized kernel for them (docs/eps.md §2.7); "" = they become GatherBlockQuantized
    float_gather: str = ""


@dataclass
class QuantizeReport:
    precision: str
    measure_errors: bool = False  # each weight's reconstruction error (quant_report.json; costs a dequantize)
    float_initializers: int = 0
    quantized: list[str] = field(default_factory=list)
    kept_float: list[str] = field(default_factory=list)
    errors: dict[str, list[float]] = field(default_factory=dict)  # weight -> [sum sq err, sum sq w]
    float_gathers: list[str] = field(default_factory=list)  # tables read by a float Gather (plan.float_gather)
    bits: dict[str, int] = field(default_factory=dict)  # quantized weight -> its bit width
    unblocked_experts: list[str] = field(default_factory=list)  # expert weights no QMoE block divides (left float)

    def unblocked_note(self) -> str | None:
        """What the build says of experts left float because no block of 16 or more divides their K."""
        if not self.unblocked_experts:
            return None
        return (
            f"{self.precision}: {len(self.unblocked_experts)} expert weight(s) stay float ({self.unblocked_experts[0]}"
            f"{', ...' if len(self.unblocked_experts) > 1 else ''}): their input width is no multiple of 16, the "
            "smallest QMoE block (listed as excluded in the manifest's quantization)"
        )

    def relative_errors(self) -> dict[str, float]:
        return {k: float(np.sqrt(e / w)) if w else 0.0 for k, (e, w) in self.errors.items()}


def plan_precision(ep: str, precision: str, quant: QuantOptions | None = None) -> PrecisionPlan:
    """Validate an (EP, precision) pair and the quantization options."""
    if ep not in SUPPORTED:
        raise InputError(f"unknown --ep '{ep}'; choose one of {', '.join(SUPPORTED)}")
    if precision not in FLOAT_DTYPES and precision not in INT_BITS:
        raise InputError(f"unknown --precision '{precision}'; choose one of {', '.join([*FLOAT_DTYPES, *INT_BITS])}")
    if not SUPPORTED[ep]:  # an EP whose packages this version cannot build (docs/eps.md §2.5)
        raise InputError(f"--ep {ep} is refused: {WHY_NOT[(ep, precision)]}")
    if precision not in SUPPORTED[ep]:
        reason = WHY_NOT.get((ep, precision), "no kernels for it")
        raise InputError(
            f"--precision {precision} cannot run with --ep {ep} ({reason}); "
            f"use --precision {' or '.join(SUPPORTED[ep])}"
        )
    if precision in FLOAT_DTYPES:
        refuse_on_float(precision, quant)
        io = FLOAT_DTYPES[precision]
        # bf16 logits are too coarse for sampling; the builder also emits fp32 logits for bf16.
        return PrecisionPlan(precision, io, ir.DataType.FLOAT if precision == "bf16" else io)
    q = quant or QuantOptions()
    if q.block_size < 16 or q.block_size > 256 or q.block_size & (q.block_size - 1):
        raise InputError(f"--block-size must be a power of two from 16 to 256, got {q.block_size}")
    if q.method not in QUANT_METHODS:
        raise InputError(f"unknown --quant-method '{q.method}'; choose {listing(QUANT_METHODS)}")
    if q.method == "search" and q.asymmetric:
        raise InputError("--quant-method search is symmetric only; drop --asymmetric or use rtn")
    if q.method == "k_quant" and q.asymmetric is False:
        raise InputError("--quant-method k_quant searches a zero point per block; drop --symmetric or use rtn")
    symmetric = default_symmetric(q.method, INT_BITS[precision]) if q.asymmetric is None else not q.asymmetric
    if q.accuracy_level is not None and q.accuracy_level not in (0, 1, 2, 3, 4):
        raise InputError(f"--accuracy-level must be 0-4, got {q.accuracy_level}")
    activations = q.activations or EPS[ep].quantized_activations[0]
    if activations not in ACTIVATIONS[ep]:
        raise InputError(
            f"--activations {activations} is not available with --ep {ep} {precision}; "
            f"use {' or '.join(ACTIVATIONS[ep])}"
        )
    io = FLOAT_DTYPES[activations]
    nbits = NBitsConfig(INT_BITS[precision], q.block_size, symmetric, q.method)
    level = EPS[ep].accuracy_level if q.accuracy_level is None else q.accuracy_level
    logits = ir.DataType.FLOAT if activations == "bf16" else io
    mixed = parse_mixed(q.mixed_precision)
    why_float = float_gather(EPS[ep], nbits)
    return PrecisionPlan(precision, io, logits, nbits, level, q.keep_float, q.embeddings, mixed, why_float)


def default_symmetric(method: str, bits: int) -> bool:
    """Zero points or none when the command line does not say (benchmarks/results/speed_vs_builder.md, sixth
    round): search's grid is symmetric only; rtn int8 has none (on the trained fixture +0.065% perplexity over
    fp32 against +0.056% with them, 3% smaller, and its CPU decode 0.98-1.06x the builder's where zero points
    gave 0.95-0.97x); rtn int4 and k_quant keep them (+2.3% vs +3.8% perplexity, benchmarks/results/
    int4_zero_points.md)."""
    return method == "search" or (method == "rtn" and bits == 8)


def quantize(model: ir.Model, plan: PrecisionPlan, report: QuantizeReport | None = None) -> QuantizeReport:
    report = report or QuantizeReport(plan.name)
    linear = {w.name: node.name or "" for node in model.graph if (w := _linear_weight(node)) is not None and w.name}
    bits = weight_bits(linear, plan.mixed)
    if plan.nbits is not None:
        from gqa_export.quant.experts import to_qmoe

        for node in list(model.graph):
            if node.op_type == "MoE" and node.domain == "com.microsoft":
                names = [v.name or "" for v in (node.inputs[2], node.inputs[4]) if v is not None]
                if any(
                    fnmatch.fnmatch(n, p) or fnmatch.fnmatch(node.name or "", p) for n in names for p in plan.keep_float
                ):
                    report.kept_float.extend(names)
                else:
                    to_qmoe(model, node, plan, report, _Quantized, _register, _replace)
                continue
            weight = _linear_weight(node) or quantized_table(node, plan.quantize_embeddings, plan.float_gather)
            if weight is None and kept_float_table(node, plan.quantize_embeddings, plan.float_gather):
                report.float_gathers.append(node.inputs[0].name or "")  # type: ignore[union-attr]
            if weight is None or weight.meta.get(WIDER_THAN_IO_META):  # a float32 router stays so
                continue
            name = weight.name or ""
            if any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(node.name or "", p) for p in plan.keep_float):
                report.kept_float.append(name)
                continue
            own = plan if bits.get(name, plan.nbits.bits) == plan.nbits.bits else _with_bits(plan, bits[name])
            report.bits[name] = own.nbits.bits  # type: ignore[union-attr]
            if node.op_type == "Gather":
                _to_gather_block_quantized(model, node, weight, own, report)
            else:
                _to_matmul_nbits(model, node, weight, own, report)
        _drop_unused_initializers(model)
        unused = [p for p in plan.keep_float if not any(fnmatch.fnmatch(n, p) for n in [*linear, *linear.values()])]
        if unused and not report.kept_float:
            raise InputError(f"--keep-float {unused[0]} matches no weight or node of this model; check the pattern")
    for value in model.graph.initializers.values():
        # graph-building bookkeeping only: once the graph is final, the tensors' own closures are
        # the last references to each weight's quantization state, freed as they are written
        value.meta.pop(QUANTIZATION_META, None)
        tensor = value.const_value
        if tensor is None or not tensor.dtype.is_floating_point():
            continue
        if tensor.dtype != plan.io_dtype and not value.meta.get(WIDER_THAN_IO_META):
            raise AssertionError(f"initializer {value.name} is {tensor.dtype.name}, planned {plan.io_dtype.name}")
        report.float_initializers += 1
    return report


def _with_bits(plan: PrecisionPlan, bits: int) -> PrecisionPlan:
    assert plan.nbits is not None
    return replace(plan, nbits=replace(plan.nbits, bits=bits))


def _linear_weight(node: ir.Node) -> ir.Value | None:
    """The constant weight of a linear layer: MatMul(x, W[K,N]) or Gemm(x, W[N,K], transB=1)."""
    if node.op_type == "MatMul" and node.domain == "":
        w = node.inputs[1]
    elif node.op_type == "Gemm" and node.attributes.get_int("transB", 0) == 1 and len(node.inputs) == 2:
        w = node.inputs[1]
    else:
        return None
    if (
        w is None
        or w.const_value is None
        or w.is_graph_input()  # a LoRA input with its default (graph/lora.py): fed at run time, stays float
        or len(w.const_value.shape) != 2
        or not w.const_value.dtype.is_floating_point()
    ):
        return None
    return w


def _quantized_inputs(
    model: ir.Model, node: ir.Node, weight: ir.Value, plan: PrecisionPlan, report: QuantizeReport
) -> tuple[str, int, int, list[ir.Value]]:
    """The packed weight, scales (and zero points) of `weight` as initializers, shared by every
    node that quantizes the same weight (a tied embedding and lm_head store one copy)."""
    cfg = plan.nbits
    assert cfg is not None
    n, k, rows = _rows_of(node, weight.const_value)
    source = weight.const_value
    release = source.release if isinstance(source, StreamedTensor) else (lambda: None)  # its mapped pages
    q = _Quantized(weight.name or "", n, k, rows, cfg, NUMPY_DTYPES[plan.io_dtype], report, release)
    base = (weight.name or "w").removesuffix(".weight")
    graph = model.graph
    packed = StreamedTensor(q.blocks, ir.DataType.UINT8, (n, cfg.k_blocks(k), cfg.blob()))
    inputs = [_register(graph, f"{base}.qweight", packed)]
    # A weight shared by two nodes is registered once; its first quantization owns the bytes.
    inputs[0].meta.setdefault(QUANTIZATION_META, q)

    def scales() -> ir.TensorProtocol:
        q.finished()
        return ir.Tensor(q.scales)

    scale_shape = ir.Shape([n, cfg.k_blocks(k)])
    inputs.append(_register(graph, f"{base}.scales", ir.LazyTensor(scales, dtype=plan.io_dtype, shape=scale_shape)))
    if not cfg.symmetric:

        def zero_points() -> ir.TensorProtocol:
            q.finished()
            return ir.Tensor(q.zero_points)

        zp = ir.LazyTensor(zero_points, dtype=ir.DataType.UINT8, shape=ir.Shape([n, cfg.zp_cols(k)]))
        inputs.append(_register(graph, f"{base}.zero_points", zp))
    report.quantized.append(weight.name or "")
    return base, n, k, inputs


def _replace(model: ir.Model, node: ir.Node, new_nodes: list[ir.Node]) -> None:
    graph = model.graph
    anchor = node
    for new in new_nodes:
        graph.insert_after(anchor, new)
        anchor = new
    old, result = node.outputs[0], new_nodes[-1].outputs[0]
    result.name, old.name = old.name, f"{old.name}_float"
    result.type, result.shape = old.type, old.shape
    ir.convenience.replace_all_uses_with(old, result, replace_graph_outputs=True)
    graph.remove(node, safe=True)


def _to_gather_block_quantized(
    model: ir.Model, node: ir.Node, weight: ir.Value, plan: PrecisionPlan, report: QuantizeReport
) -> None:
    """Gather(E, ids) -> GatherBlockQuantized on E's MatMulNBits blobs [V, k_blocks, blob]
    (quantize_axis 2), so a tied lm_head reads the very same bytes; output reshaped to [..., K]."""
    cfg = plan.nbits
    assert cfg is not None
    base, n, k, (packed, scales, *zp) = _quantized_inputs(model, node, weight, plan, report)
    graph, name = model.graph, node.name or base
    if zp:
        # GatherBlockQuantized wants one zero point per block in its own byte ([V, k_blocks, 1]);
        # MatMulNBits packs two 4-bit ones per byte. Same values, unpacked (k_blocks bytes a row).
        owner = packed.meta[QUANTIZATION_META]
        blocks = cfg.k_blocks(k)

        def unpacked_zero_points() -> ir.TensorProtocol:
            owner.finished()
            z = owner.zero_points
            assert z is not None
            if cfg.bits == 4:
                z = np.stack([z & 0x0F, z >> 4], axis=-1).reshape(n, -1)
            return ir.Tensor(np.ascontiguousarray(z[:, :blocks, None]))

        zp_tensor = ir.LazyTensor(unpacked_zero_points, dtype=ir.DataType.UINT8, shape=ir.Shape([n, blocks, 1]))
        zp = [_register(graph, f"{base}.gather_zero_points", zp_tensor)]
    shape3 = _register(graph, f"{base}.scales_shape", ir.Tensor(np.array([n, cfg.k_blocks(k), 1], dtype=np.int64)))
    padded = cfg.k_blocks(k) * cfg.block_size  # K, or K rounded up to whole blocks
    flat = _register(graph, f"{base}.gather_shape", ir.Tensor(np.array([0, 0, padded], dtype=np.int64)))
    reshape_scales = ir.Node("", "Reshape", [scales, shape3], name=f"{name}/scales3d", num_outputs=1)
    attrs = ir.convenience.convert_attributes(
        {"gather_axis": 0, "quantize_axis": 2, "block_size": cfg.block_size, "bits": cfg.bits}
    )
    gathered = ir.Node(
        "com.microsoft", "GatherBlockQuantized", [packed, node.inputs[1], reshape_scales.outputs[0], *zp],
        attributes=attrs, name=f"{name}/GatherBlockQuantized", num_outputs=1,
    )  # fmt: skip
    reshaped = ir.Node("", "Reshape", [gathered.outputs[0], flat], name=f"{name}/to_hidden", num_outputs=1)
    nodes = [reshape_scales, gathered, reshaped]
    if padded != k:  # the last block's padding columns are dequantized too: cut them off
        bounds = [_register(graph, f"{base}.gather_{what}", ir.Tensor(np.array([v], np.int64)))
                  for what, v in (("start", 0), ("end", k), ("axis", -1))]  # fmt: skip
        nodes.append(ir.Node("", "Slice", [reshaped.outputs[0], *bounds], name=f"{name}/to_k", num_outputs=1))
    _replace(model, node, nodes)


def _rows_of(node: ir.Node, tensor: ir.TensorProtocol) -> tuple[int, int, Callable[[int, int], np.ndarray]]:
    """(N, K, rows(a, b) -> W[a:b] float32) for the weight W [N, K] of the linear layer."""
    transposed = node.op_type in ("Gemm", "Gather")  # Gemm(transB=1)/Gather hold W itself; MatMul holds W.T
    d0, d1 = (int(d) for d in tensor.shape)
    n, k = (d0, d1) if transposed else (d1, d0)
    source = getattr(tensor, "source_rows", None)
    if source is not None:
        return n, k, source
    array = tensor.numpy()  # external data is memory-mapped: only the rows asked for are read

    def rows(a: int, b: int) -> np.ndarray:
        part = array[a:b] if transposed else array[:, a:b].T
        return np.asarray(part, dtype=np.float32)

    return n, k, rows


class _Quantized:
    """One weight's quantization, run block by block when the packed tensor is written.

    Scales and zero points are small (1/8 of the packed bytes or less) and are kept from that
    pass; asked for first, they run the pass themselves without keeping the packed blocks.
    """

    def __init__(
        self,
        name: str,
        n: int,
        k: int,
        rows: Callable[[int, int], np.ndarray],
        cfg: NBitsConfig,
        scale_dtype: np.dtype,
        report: QuantizeReport,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self.name, self.n, self.k, self.rows, self.cfg = name, n, k, rows, cfg
        self.scale_dtype, self.report, self.release = scale_dtype, report, release
        self.scales: np.ndarray | None = None
        self.zero_points: np.ndarray | None = None

    def blocks(self) -> Iterator[np.ndarray]:
        scales, zps, err, norm = [], [], 0.0, 0.0
        # search keeps ~16 block-sized temporaries: smaller row blocks keep its peak down
        row_bytes = self.k * 4 * (8 if self.cfg.method in ("search", "k_quant") else 1)
        for a, b in row_blocks(self.n, row_bytes):
            w = self.rows(a, b)
            packed, s, z = quantize_rows(w, self.cfg)
            if self.report.measure_errors:
                seen = s.astype(self.scale_dtype).astype(np.float32)  # the scales the kernel will see
                err += float(((dequantize(packed, seen, z, self.k, self.cfg) - w) ** 2).sum())
                norm += float((w**2).sum())
            scales.append(s)
            zps.append(z)
            yield packed
        self.release()
        self.scales = np.concatenate(scales).astype(self.scale_dtype)
        self.zero_points = np.concatenate(zps)
        if self.report.measure_errors:
            self.report.errors[self.name] = [err, norm]

    def finished(self) -> None:
        if self.scales is None:
            for _ in self.blocks():
                pass


def _to_matmul_nbits(
    model: ir.Model, node: ir.Node, weight: ir.Value, plan: PrecisionPlan, report: QuantizeReport
) -> None:
    cfg = plan.nbits
    assert cfg is not None
    base, n, k, inputs = _quantized_inputs(model, node, weight, plan, report)
    attrs = ir.convenience.convert_attributes(
        {"K": k, "N": n, "bits": cfg.bits, "block_size": cfg.block_size, "accuracy_level": plan.accuracy_level}
    )
    new = ir.Node("com.microsoft", "MatMulNBits", [node.inputs[0], *inputs], attributes=attrs,
                  name=(node.name or base) + "NBits", num_outputs=1)  # fmt: skip
    _replace(model, node, [new])


def _register(graph: ir.Graph, name: str, tensor: ir.TensorProtocol) -> ir.Value:
    existing = graph.initializers.get(name)
    if existing is not None:  # a weight shared by two nodes quantizes once
        return existing
    tensor.name = name
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(tensor.shape), const_value=tensor)
    graph.register_initializer(value)
    return value


def _drop_unused_initializers(model: ir.Model) -> None:
    for name, value in list(model.graph.initializers.items()):
        if not value.uses() and value not in model.graph.outputs:
            del model.graph.initializers[name]
