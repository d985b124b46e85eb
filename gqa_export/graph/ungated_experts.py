"""Ungated experts (MoeSpec activation "ungated"): y = sum_e w_e * down_e(act(up_e x)), with the
config's hidden activation, as two plain MatMuls over every expert at once.

Why plain ops: com.microsoft.MoE / QMoE take relu, gelu, silu, swiglu and identity; squared ReLU,
the activation of the one family with ungated experts (Nemotron-H), is refused by the CPU kernels
("Unsupported MoE activation type", docs/hybrid-state.md §8.7, probed).

The form: with the experts' up weights stacked on rows, U = [up_0; ...; up_{E-1}] [E*I, D], one
MatMul gives every expert's pre-activation h = x U^T [.., E*I]. The activation is elementwise, and
the routing weight w_e [.., E] (dense, zero off the chosen experts, graph/moe.py) scales expert e's
I channels. The down weights side by side, W = [down_0 | ... | down_{E-1}] [D, E*I], then give
sum_e w_e down_e(act(h_e)) = (act(h) * w) W^T as a second MatMul. Both weights are plain 2-D MatMul
weights, so the int4/int8 stages quantize them as MatMulNBits like any linear layer. The cost: every
expert runs on every token (E / k times the compute of a sparse kernel, an [.., E*I] intermediate),
exact for any routing. Optional latent projections (in and out of a width D < hidden) surround the
experts; the router and the shared expert read the layer input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from gqa_export.errors import InputError
from gqa_export.graph import params as _params
from gqa_export.graph.activations import activation
from gqa_export.graph.blocks import LayerContext, linear, normalize
from gqa_export.graph.experts import check_expert_shapes
from gqa_export.graph.normed_experts import normed_experts
from gqa_export.graph.params import F32, NUMPY_DTYPES, Params, StreamedTensor, row_blocks
from gqa_export.kernels import convert
from gqa_export.model.moe import MoeDims
from gqa_export.source.weights import WeightStore


@dataclass(frozen=True)
class UngatedLayout:
    """One layer's ungated experts: per-expert Linear names (`{e}` templates) or two stacked tensors."""

    up: str  # template with {e} ([I, D] each) or a stacked name ([E, I, D])
    down: str  # template with {e} ([D, I] each) or a stacked name ([E, D, I])
    per_expert: bool
    count: int
    width: int  # I
    model: int  # D: hidden_size, or the latent width

    def names(self, which: str) -> list[str]:
        template = self.up if which == "up" else self.down
        return [template.format(e=e) for e in range(self.count)] if self.per_expert else [template]


class _Reader:
    """Row and column blocks of expert e's up [I, D] / down [D, I], whatever the layout, as stored."""

    def __init__(self, store: WeightStore, layout: UngatedLayout) -> None:
        self.store, self.layout = store, layout

    def block(self, which: str, e: int, rows: tuple[int, int] | None, cols: tuple[int, int] | None) -> np.ndarray:
        L = self.layout
        if L.per_expert:
            return self.store.read((L.up if which == "up" else L.down).format(e=e), rows=rows, cols=cols)
        r, c = (slice(*rows) if rows else slice(None)), (slice(*cols) if cols else slice(None))
        return self.store.read_slices(L.up if which == "up" else L.down, slice(e, e + 1), r, c)[0]

    def release(self) -> None:
        for name in self.layout.names("up") + self.layout.names("down"):
            self.store.release(name)


def find_layout(lc: LayerContext, prefix: str, moe: MoeDims) -> UngatedLayout:
    """The spec's first (up, down) spelling this layer's checkpoint holds, its shapes checked."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    store, layer = lc.params.store, lc.spec.layer_tensor(lc.i, "", "")
    for up, down in names.ungated:
        per_expert = "{e}" in up
        full = [f"{layer}{prefix}{n}" + (".weight" if per_expert else "") for n in (up, down)]
        if (full[0].format(e=0) if per_expert else full[0]) in store:
            model = int(store.info(full[0].format(e=0) if per_expert else full[0]).shape[-1])
            layout = UngatedLayout(full[0], full[1], per_expert, moe.experts, moe.intermediate, model)
            _check(store, layout, f"layer {lc.i}")
            return layout
    raise InputError(
        f"layer {lc.i}: no expert weights under '{layer}{prefix}' in the checkpoint (looked for the per-expert and "
        f"stacked layouts of {lc.spec.name}); the checkpoint does not match its config.json"
    )


def _check(store: WeightStore, layout: UngatedLayout, where: str) -> None:
    E, I, D = layout.count, layout.width, layout.model  # noqa: E741
    if layout.per_expert:
        expected = {n: (I, D) for n in layout.names("up")} | {n: (D, I) for n in layout.names("down")}
    else:
        expected = {layout.up: (E, I, D), layout.down: (E, D, I)}
    check_expert_shapes(store, expected, where, f"{E} experts, moe_intermediate_size {I}, width {D}")


def stacked_up(reader: _Reader, params: Params) -> StreamedTensor:
    """MatMul's [D, E*I]: the transpose of every expert's up rows stacked. Per-expert Linears are
    Params.matmul_weight's concatenation on `out`; a stacked [E, I, D] is written a band of D at a
    time, or in place expert by expert where those bands would be thin (`_scatter_up`)."""
    L = reader.layout
    E, I, D = L.count, L.width, L.model  # noqa: E741
    if L.per_expert:
        return params.matmul_weight(L.names("up"))
    dtype, cast = params.dtype, params.cast

    def blocks() -> Iterator[np.ndarray]:
        for a, b in row_blocks(D, E * I * 4):
            cols = np.concatenate([reader.block("up", e, None, (a, b)) for e in range(E)], axis=0)  # [E*I, b-a]
            yield cast(convert(cols, F32, transpose=True))
        tensor.release()

    def source_rows(a: int, b: int) -> np.ndarray:  # rows [a, b) of [E*I, D]
        parts = []
        for e in range(a // I, (b - 1) // I + 1):
            lo, hi = max(a, e * I) - e * I, min(b, (e + 1) * I) - e * I
            parts.append(convert(reader.block("up", e, (lo, hi), None), F32))
        return np.concatenate(parts, axis=0)

    tensor = StreamedTensor(blocks, dtype, (D, E * I))
    tensor.source_rows, tensor.release = source_rows, reader.release
    if _params.CHUNK_BYTES // (E * I * 4) < min(_params.MIN_SLAB_ROWS, D):
        tensor.scatter = lambda write_at: _scatter_up(reader, NUMPY_DTYPES[dtype], write_at)
    return tensor


def _scatter_up(reader: _Reader, np_dtype: np.dtype, write_at: Callable[[int, memoryview], None]) -> None:
    """[D, E*I] written in place: each band of one expert's up rows (one contiguous read) is
    transposed to [D, band] and written as D segments at their offsets, so every source byte is
    read once (row-order blocks of D would each read a thin column slab of every expert)."""
    L = reader.layout
    E, I, D = L.count, L.width, L.model  # noqa: E741
    itemsize, band = np.dtype(np_dtype).itemsize, max(1, _params.MAPPED_BYTES // (D * 4))
    for e in range(E):
        for r0 in range(0, I, band):
            r1 = min(I, r0 + band)
            raw = convert(reader.block("up", e, (r0, r1), None), np_dtype, True).view(np.uint8).reshape(D, -1)
            for k in range(D):
                write_at((k * E * I + e * I + r0) * itemsize, memoryview(raw[k]))
    reader.release()


def side_by_side_down(reader: _Reader, dtype: ir.DataType, cast) -> StreamedTensor:
    """MatMul's [E*I, D]: every expert's down [D, I] transposed, stacked; one expert's band at a time."""
    L = reader.layout
    E, I, D = L.count, L.width, L.model  # noqa: E741

    def blocks() -> Iterator[np.ndarray]:
        for e in range(E):
            for a, b in row_blocks(I, D * 4):
                yield cast(convert(reader.block("down", e, None, (a, b)), F32, transpose=True))
        tensor.release()

    def source_rows(a: int, b: int) -> np.ndarray:  # rows [a, b) of [D, E*I]
        return np.concatenate([convert(reader.block("down", e, (a, b), None), F32) for e in range(E)], axis=1)

    tensor = StreamedTensor(blocks, dtype, (E * I, D))
    tensor.source_rows, tensor.release = source_rows, reader.release
    return tensor


def ungated_experts(lc: LayerContext, x: ir.Value, weights_dense: ir.Value, moe: MoeDims, prefix: str) -> ir.Value:
    """The routed experts' sum [B,S,H] for x [B,S,H] and dense routing weights [B,S,E]."""
    b, params = lc.b, lc.params
    names = lc.spec.moe.names  # type: ignore[union-attr]
    if names.expert_norm is not None:  # Ergo: a norm per expert before the sum, which this form folds away
        return normed_experts(lc, x, weights_dense, moe, prefix)
    latent = names.latent if names.latent and lc.has(f"{prefix}{names.latent[0]}") else None
    with b.scope("experts"):
        if latent is not None:
            x = linear(lc, x, [f"{prefix}{latent[0]}"], None, "latent_in")
        layout = find_layout(lc, prefix, moe)
        reader = _Reader(params.store, layout)
        base = lc.spec.layer_tensor(lc.i, f"{prefix}experts", "")
        up = b.initializer(f"{base}.up_stacked", stacked_up(reader, params))
        down = b.initializer(f"{base}.down_side_by_side", side_by_side_down(reader, params.dtype, params.cast))
        h = activation(lc, b.op("MatMul", x, up, name="up_all"))  # [B,S,E*I]
        per_expert = b.op("Reshape", h, b.const([0, 0, moe.experts, moe.intermediate], "per_expert", "int64"))
        weighted = b.op("Mul", per_expert, b.op("Unsqueeze", weights_dense, b.const([-1], "last", "int64")))
        flat = b.op("Reshape", weighted, b.const([0, 0, moe.experts * moe.intermediate], "flat", "int64"))
        y = b.op("MatMul", flat, down, name="down_all")  # [B,S,D]
        if latent is not None:
            y = linear(lc, y, [f"{prefix}{latent[1]}"], None, "latent_out")
        return y


def ungated_shared_expert(lc: LayerContext, x: ir.Value, prefix: str) -> ir.Value:
    """The always-on shared expert of an ungated block: down(act(up x)) (+ biases where stored), then its
    own RMSNorm where the spec names one (Ergo's shared_experts.norm)."""
    names = lc.spec.moe.names  # type: ignore[union-attr]
    module = f"{prefix}{names.shared_expert}"
    with lc.b.scope("shared_expert"):
        h = activation(lc, linear(lc, x, [f"{module}.up_proj"], None, "up"))
        y = linear(lc, h, [f"{module}.down_proj"], None, "down")
        if names.shared_expert_norm is None:
            return y
        norm = lc.name(f"{module}.{names.shared_expert_norm}")
        return normalize(lc.b, y, norm, lc.params, lc.dims, "shared_expert_norm", lc.dims.hidden_size)
