"""A pre-quantized checkpoint's integers moved into MatMulNBits, never re-rounded.

Runs before the precision stage. Every linear layer whose weight is a concatenation of
pre-quantized linears (`source.imported.ImportedStore.native`) becomes one MatMulNBits whose
B, scales and zero points are the checkpoint's own, streamed a block of output rows at a time
(docs/prequantized.md §3). Rules from the op's measured behaviour (docs/prequantized.md §4):
- no `g_idx` input ever: act-order is a Gather of the activations by the input permutation;
- no zero-point input when every zero point is the default 2^(bits-1);
- scales cast to the activation dtype (fp16 -> fp32 is exact).
Packed QKV / gate-up concatenate along N, which is exact when the members agree on bits, block
size and permutation; when they do not, the export is refused in one line. MoE experts quantized
one Linear per expert become QMoE or per-expert MatMulNBits (quant/imported_experts.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph.params import NUMPY_DTYPES, StreamedTensor, row_blocks
from gqa_export.quant.activation_quant import absmax_per_token
from gqa_export.quant.imported_experts import expert_linears, import_experts
from gqa_export.quant.quantize import PrecisionPlan, _linear_weight, _register, _replace
from gqa_export.source.imported import ImportedStore
from gqa_export.source.native import NativeLinear, pack_fields, pad_to_blocks


@dataclass
class ImportReport:
    """What came from the checkpoint's own quantization (for the manifest and build notes)."""

    source_format: str = ""
    weights: dict[str, str] = field(default_factory=dict)  # HF weight name -> "gptq v1 4-bit block 32 act-order"
    dequantized: list[str] = field(default_factory=list)  # read as float (a path that cannot take the integers)
    precision: str = ""
    # graph weights this build quantized itself (--precision int4/int8): the float ones the checkpoint
    # left (lm_head, ...) and the dequantized ones; everything else in the package is float
    by_precision: list[str] = field(default_factory=list)

    def note(self, precision: str) -> str:
        # one graph weight can be listed once per graph that holds it (--attention split): count names
        count = len(set(self.by_precision))
        ours = f"; {count} weights quantized by --precision {precision}" if self.by_precision else ""
        if not self.weights:
            done = f"{len(self.dequantized)} weights dequantized exactly to float while streaming"
            head = f"pre-quantized {self.source_format}: {done}, then --precision {precision} like a float checkpoint"
            return head + ours
        kept = f"{len(self.weights)} linear layers keep the checkpoint's {self.source_format} integers"
        rest = f"the other weights follow --precision {precision}"
        return f"pre-quantized {self.source_format}: {kept} (MatMulNBits, not re-quantized); {rest}{ours}"

    def manifest(self) -> dict[str, object]:
        return {"source_format": self.source_format, "imported": dict(sorted(self.weights.items())),
                "dequantized": sorted(self.dequantized), "precision": self.precision,
                "quantized_by_precision": sorted(set(self.by_precision))}  # fmt: skip


def import_native(model: ir.Model, store: ImportedStore, plan: PrecisionPlan, report: ImportReport) -> None:
    """Replace each pre-quantized linear (MatMul with a checkpoint-sourced weight) by MatMulNBits."""
    report.source_format = store.format.reported
    dtype = NUMPY_DTYPES[plan.io_dtype]
    for node in list(model.graph):
        if node.op_type == "MoE" and node.domain == "com.microsoft":  # per-expert quantized linears
            experts = expert_linears(store, node)
            if experts is not None:
                import_experts(model, node, experts, plan, report.weights)
            continue
        weight = _linear_weight(node)
        if weight is None or node.op_type != "MatMul" or not isinstance(weight.const_value, StreamedTensor):
            continue
        members = [store.native(s) for s in weight.const_value.sources]
        if not members or any(m is None for m in members):
            continue
        _to_matmul_nbits(model, node, weight, [m for m in members if m is not None], dtype, plan, report)
    report.dequantized = sorted(name for name in store.virtual() if name not in report.weights)
    lost = [name for name in report.dequantized if (linear := store.native(name)) and linear.activation_bits]
    if lost:  # read as float, the Linear would skip its activation quantization: another model
        raise InputError(
            f"{lost[0]} quantizes its input to int8 per token (BitNet), which gqa-export keeps only where its "
            "ternary codes become MatMulNBits, and this build reads it as a float weight; export without the "
            "option that needs the float weight (docs/prequantized.md §3.10)"
        )
    for name, value in list(model.graph.initializers.items()):
        if not value.uses() and value not in model.graph.outputs:
            del model.graph.initializers[name]


def _to_matmul_nbits(
    model: ir.Model,
    node: ir.Node,
    weight: ir.Value,
    members: list[NativeLinear],
    dtype: np.dtype,
    plan: PrecisionPlan,
    report: ImportReport,
) -> None:
    first = members[0]
    for other in members[1:]:
        same_perm = (first.perm is None) == (other.perm is None) and (
            first.perm is None or np.array_equal(first.perm, other.perm)
        )
        same = (other.bits, other.block_size, other.k, other.activation_bits)
        if same != (first.bits, first.block_size, first.k, first.activation_bits) or not same_perm:
            raise InputError(
                f"{first.prefix} and {other.prefix} are packed into one MatMul but were quantized differently "
                "(bits, group size or act-order permutation); gqa-export cannot import them packed yet: "
                "export the model's float checkpoint instead"
            )
    n, k, bits, bs = sum(m.n for m in members), first.k, first.bits, first.block_size
    # BitNet's ternary codes at --precision int4: written as 4-bit codes q - z + 8 (the op's default zero
    # point, no zero-point input), the same weights on the CPU kernel that is fast at level 0 (§3.10)
    widened = bool(first.activation_bits) and bits == 2 and plan.nbits is not None and plan.nbits.bits == 4
    bits = 4 if widened else bits
    kb, blob = first.k_blocks, bs * bits // 8
    graph, base = model.graph, (weight.name or "w").removesuffix(".weight")

    def rows(m: NativeLinear, a: int, b: int) -> np.ndarray:
        if not widened:
            return m.packed_rows(a, b)
        zero = np.repeat(m.block_zero_points()[a:b], bs, axis=1)[:, :k].astype(np.int16)
        codes = m.codes(a, b).astype(np.int16) - zero + (1 << (bits - 1))
        return pack_fields(pad_to_blocks(codes, kb * bs, 1 << (bits - 1)), bits).reshape(b - a, kb, blob)

    def blocks() -> Iterator[np.ndarray]:
        for m in members:
            for a, b in row_blocks(m.n, k):
                yield rows(m, a, b)
            m.store.release(m.name)

    def scales() -> ir.TensorProtocol:  # read when written: one weight's scales in memory at a time
        return ir.Tensor(np.concatenate([m.block_scales() for m in members]).astype(dtype))

    def zero_points() -> ir.TensorProtocol:
        zp = pack_fields(np.concatenate([m.block_zero_points() for m in members]), bits)
        return ir.Tensor(np.ascontiguousarray(zp))

    packed = StreamedTensor(blocks, ir.DataType.UINT8, (n, kb, blob))
    inputs = [
        _register(graph, f"{base}.qweight", packed),
        _register(graph, f"{base}.scales", ir.LazyTensor(scales, dtype=plan.io_dtype, shape=ir.Shape([n, kb]))),
    ]
    if not widened and not all(m.symmetric for m in members):
        zp_shape = ir.Shape([n, (kb * bits + 7) // 8])
        inputs.append(
            _register(graph, f"{base}.zero_points", ir.LazyTensor(zero_points, dtype=ir.DataType.UINT8, shape=zp_shape))
        )
    activations = node.inputs[0]
    assert activations is not None
    nodes: list[ir.Node] = []
    if first.perm is not None:  # act-order: the node reads x[..., perm] (docs/prequantized.md §3.3)
        perm = _register(graph, f"{base}.input_permutation", ir.Tensor(first.perm.astype(np.int64)))
        gather = ir.Node("", "Gather", [activations, perm], attributes=[ir.AttrInt64("axis", -1)],
                         name=f"{node.name or base}/act_order", num_outputs=1)  # fmt: skip
        nodes.append(gather)
        activations = gather.outputs[0]
    level = plan.accuracy_level
    if first.activation_bits:  # BitNet: the input quantized per token first (docs/prequantized.md §3.10)
        quantized, activations = absmax_per_token(
            graph, activations, first.activation_bits, plan.io_dtype, f"{node.name or base}/activation_int8"
        )
        nodes.extend(quantized)
        level = 0  # level 4 would quantize those activations again, per block (§4)
    attrs = ir.convenience.convert_attributes({"K": k, "N": n, "bits": bits, "block_size": bs, "accuracy_level": level})
    nodes.append(ir.Node("com.microsoft", "MatMulNBits", [activations, *inputs], attributes=attrs,
                         name=(node.name or base) + "NBits", num_outputs=1))  # fmt: skip
    _replace(model, node, nodes)
    for m in members:
        how = f"{m.fmt} {m.bits}-bit group {m.group} (block {bs})" + (" as 4-bit codes" if widened else "")
        how += " act-order" if m.perm is not None else ""
        how += " symmetric" if m.symmetric else ""
        how += f" int{m.activation_bits} activations per token" if m.activation_bits else ""
        report.weights[m.name] = how
