"""int4/int8 experts: com.microsoft.MoE -> com.microsoft.QMoE, quantized while the weights stream.

QMoE on CPU (docs/moe.md §1.2, §4, §6, probed on onnxruntime 1.31.1):
- weights [E, N, K*bits/8] uint8, row-major, element k in the low bits first: MatMulNBits' packing
  per row, so the same block quantizer runs over the experts' rows, one row block at a time;
  block-wise scales [E, N, K/block] (activation dtype), zero points [E, N, ceil(blocks*bits/8)];
  `block_size` must divide K of both fc1 (hidden) and fc2 (expert width);
- routing: top-k of router_probs, then a softmax over the k values, always renormalized, unless
  `router_weights` is given: then the mixing weights are taken as given. A MoE node that does not
  renormalize gets router_weights = Softmax(router_probs) (= MoE's own softmax; for PhiMoE's
  log-weights that is w / sum(w), which its following rescale expects).
"""

from __future__ import annotations

import onnx_ir as ir

from gqa_export.graph.params import NUMPY_DTYPES, StreamedTensor
from gqa_export.quant.nbits import NBitsConfig


def moe_block_size(cfg: NBitsConfig, widths: tuple[int, ...]) -> int | None:
    """The largest power-of-two block <= the requested one (>= 16) dividing every K, or None."""
    block = cfg.block_size
    while block >= 16:
        if all(k % block == 0 for k in widths):
            return block
        block //= 2
    return None


def to_qmoe(model: ir.Model, node: ir.Node, plan, report, quantized_cls, register, replace) -> bool:
    """Replace one MoE node by QMoE; False (left float, noted in the report) when no block fits."""
    cfg = plan.nbits
    given = [*node.inputs, *[None] * (6 - len(node.inputs))]  # trailing optional inputs may be dropped
    fc1, fc2 = given[2], given[4]
    tensors = [v.const_value if v is not None else None for v in (fc1, fc2)]
    if not all(isinstance(t, StreamedTensor) and t.source_rows is not None for t in tensors):
        return False
    (experts, n1, k1), (_, n2, k2) = (tuple(int(d) for d in t.shape) for t in tensors)  # type: ignore[union-attr]
    block = moe_block_size(cfg, (k1, k2))
    if block is None:
        names = [v.name or "" for v in (fc1, fc2)]  # type: ignore[union-attr]
        report.kept_float.extend(names)
        report.unblocked_experts.extend(names)
        return False
    qcfg = NBitsConfig(cfg.bits, block, cfg.symmetric, cfg.method)
    graph = model.graph
    inputs: dict[str, ir.Value] = {}
    for tag, value, tensor, n, k in (("fc1", fc1, tensors[0], n1, k1), ("fc2", fc2, tensors[1], n2, k2)):
        name = value.name or tag  # type: ignore[union-attr]
        q = quantized_cls(
            name,
            experts * n,
            k,
            tensor.source_rows,
            qcfg,
            NUMPY_DTYPES[plan.io_dtype],
            report,
            tensor.release,  # type: ignore[union-attr]
        )
        packed = StreamedTensor(q.blocks, ir.DataType.UINT8, (experts, n, qcfg.k_blocks(k) * qcfg.blob()))
        inputs[f"{tag}_weights"] = register(graph, f"{name}.qweight", packed)

        def scales(q=q, n=n, k=k) -> ir.TensorProtocol:
            q.finished()
            return ir.Tensor(q.scales.reshape(experts, n, qcfg.k_blocks(k)))

        shape = ir.Shape([experts, n, qcfg.k_blocks(k)])
        inputs[f"{tag}_scales"] = register(
            graph, f"{name}.scales", ir.LazyTensor(scales, dtype=plan.io_dtype, shape=shape)
        )
        if not qcfg.symmetric:

            def zero_points(q=q, n=n, k=k) -> ir.TensorProtocol:
                q.finished()
                return ir.Tensor(q.zero_points.reshape(experts, n, qcfg.zp_cols(k)))

            zp = ir.LazyTensor(zero_points, dtype=ir.DataType.UINT8, shape=ir.Shape([experts, n, qcfg.zp_cols(k)]))
            inputs[f"{tag}_zero_points"] = register(graph, f"{name}.zero_points", zp)
        report.quantized.append(name)
    attrs = {k: a.value for k, a in node.attributes.items()}
    normalize = int(attrs.get("normalize_routing_weights", 0))
    new_nodes = []
    router_weights = None
    if not normalize:
        softmax = ir.Node("", "Softmax", [node.inputs[1]], attributes=ir.convenience.convert_attributes({"axis": -1}),
                          name=f"{node.name}/router_weights", num_outputs=1)  # fmt: skip
        new_nodes.append(softmax)
        router_weights = softmax.outputs[0]
    attrs.update(expert_weight_bits=cfg.bits, block_size=block, accuracy_level=plan.accuracy_level)
    qmoe = ir.Node(
        "com.microsoft", "QMoE",
        [given[0], given[1], inputs["fc1_weights"], inputs["fc1_scales"], given[3],
         inputs["fc2_weights"], inputs["fc2_scales"], given[5], None, None, None,
         inputs.get("fc1_zero_points"), inputs.get("fc2_zero_points"), None, router_weights],
        attributes=ir.convenience.convert_attributes(attrs), name=f"{node.name}Q", num_outputs=1,
    )  # fmt: skip
    replace(model, node, [*new_nodes, qmoe])
    return True
