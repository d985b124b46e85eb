"""Mixture-of-experts weights streamed into the layouts of com.microsoft.MoE / QMoE.

The op wants (docs/moe.md §3) fc1 [E, 2I, H] with gate and up rows interleaved (row 2j = gate_j, row
2j+1 = up_j; the CPU kernels accept only `swiglu_fusion=1`), fc2 [E, H, I], both in nn.Linear's
(out, in) layout, and biases [E, 2I] (same interleave) / [E, H].

Checkpoints hold experts in one of these layouts (transformers 5.x writes the hub's per-expert
layout by default and its fused one with `save_original_format=False`):
- per expert: `experts.{e}.{gate,up,down}` Linear weights ([I,H], [I,H], [H,I]);
- fused halves: `experts.gate_up_proj` [E, 2I, H] = [gate; up], `experts.down_proj` [E, H, I];
- fused transposed halves (Llama-4): `experts.gate_up_proj` [E, H, 2I] = [gate | up] along the last
  axis, `experts.down_proj` [E, I, H];
- stacked rows (DBRX): `experts.mlp.{w1,v1,w2}` each [E*I, H], expert e's rows e*I..(e+1)*I: gate
  and up (out, in), down stored (in, out) (`x @ w2` in its modeling code);
- fused transposed (gpt-oss): `experts.gate_up_proj` [E, H, 2I] already interleaved,
  `experts.down_proj` [E, I, H], with `_bias` tensors; or the same in MXFP4
  (`*_blocks` [E, N, K/32, 16] uint8 nibbles + `*_scales` [E, N, K/32] uint8 e8m0 exponents).

Whatever the layout, an `ExpertWeights` gives rows [a, b) of one expert's fc1 / fc2 as float32, so
that both the float tensors (written block by block) and the QMoE quantizer read one expert at a
time: peak memory stays at one expert's rows however many experts there are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from gqa_export.errors import InputError
from gqa_export.graph.params import F32, StreamedTensor, row_blocks
from gqa_export.kernels import convert
from gqa_export.source.weights import WeightStore

# MXFP4 (OCP microscaling fp4 e2m1): the 16 code points, low nibble first; scales are e8m0 (2^(s-127))
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32
)


@dataclass(frozen=True)
class ExpertLayout:
    """Where one layer's experts live. Exactly one of the three forms is set."""

    count: int
    intermediate: int
    hidden: int
    per_expert: tuple[str, str, str] | None = None  # name templates with {e}: gate, up, down
    fused: tuple[str, str] | None = None  # gate_up [E,2I,H] halves, down [E,H,I]
    transposed: tuple[str, str] | None = None  # gate_up [E,H,2I] interleaved, down [E,I,H] (gpt-oss)
    mxfp4: bool = False  # transposed names hold `_blocks` / `_scales` instead of the tensors
    biases: tuple[str, str] | None = None  # fc1 bias [E,2I], fc2 bias [E,H] (gpt-oss; already interleaved)
    halves: bool = False  # a transposed gate_up holds [gate | up] halves, not interleaved pairs (Llama-4)
    stacked_rows: tuple[str, str, str] | None = None  # gate, up, down [E*I, H] each; down (in, out) (DBRX)
    # rows past the E experts in a fused gate_up that no expert reads (LongCat-Flash's zero experts get
    # gate_up rows, [E + Z, 2I, H], and no down_proj, in transformers < 5.25's save; 5.25's has none)
    spare: int = 0


class ExpertWeights:
    """Rows of each expert's fc1 (interleaved gate/up) and fc2, read from the checkpoint on demand."""

    def __init__(self, store: WeightStore, layout: ExpertLayout) -> None:
        self.store, self.layout = store, layout

    # --- fc1: [2I, H] per expert -----------------------------------------------------------------
    def fc1_rows(self, e: int, a: int, b: int) -> np.ndarray:
        L = self.layout
        if L.transposed and not L.halves:
            return self._transposed(L.transposed[0], e, a, b)
        lo, hi = a // 2, (b + 1) // 2  # gate/up rows covering interleaved rows [a, b)
        if L.transposed:  # [gate | up] columns of a stacked (in, out) tensor
            gate = self._transposed(L.transposed[0], e, lo, hi)
            up = self._transposed(L.transposed[0], e, L.intermediate + lo, L.intermediate + hi)
        elif L.per_expert:
            gate = self._read(L.per_expert[0].format(e=e), lo, hi)
            up = self._read(L.per_expert[1].format(e=e), lo, hi)
        elif L.stacked_rows:  # expert e's rows of [E*I, H]
            first = e * L.intermediate
            gate = self._read(L.stacked_rows[0], first + lo, first + hi)
            up = self._read(L.stacked_rows[1], first + lo, first + hi)
        else:
            assert L.fused
            gate = self._read3(L.fused[0], e, lo, hi)
            up = self._read3(L.fused[0], e, L.intermediate + lo, L.intermediate + hi)
        both = np.stack([gate, up], axis=1).reshape(2 * (hi - lo), -1)
        return both[a - 2 * lo : b - 2 * lo]

    # --- fc2: [H, I] per expert -------------------------------------------------------------------
    def fc2_rows(self, e: int, a: int, b: int) -> np.ndarray:
        L = self.layout
        if L.transposed:
            return self._transposed(L.transposed[1], e, a, b)
        if L.per_expert:
            return self._read(L.per_expert[2].format(e=e), a, b)
        if L.stacked_rows:  # columns [a, b) of expert e's (in, out) block [I, H]
            rows = slice(e * L.intermediate, (e + 1) * L.intermediate)
            return convert(self.store.read_slices(L.stacked_rows[2], rows, slice(a, b)), F32, transpose=True)
        assert L.fused
        return self._read3(L.fused[1], e, a, b)

    def bias(self, which: int) -> np.ndarray | None:
        """fc1 (0) or fc2 (1) biases [E, N] as float32, or None."""
        if not self.layout.biases:
            return None
        return self.store.read(self.layout.biases[which]).astype(np.float32)

    def release(self) -> None:
        """Drop every expert tensor's mapped pages (WeightStore.release) once a stack is written."""
        L = self.layout
        names = [t.format(e=e) for t in L.per_expert or () for e in range(L.count)]
        names += list(L.fused or ()) + list(L.stacked_rows or ())
        names += [
            f"{t}{suffix}" for t in L.transposed or () for suffix in (("_blocks", "_scales") if L.mxfp4 else ("",))
        ]
        for name in names:
            self.store.release(name)

    # --- readers ------------------------------------------------------------------------------------
    def _read(self, name: str, a: int, b: int) -> np.ndarray:
        return convert(self.store.read(name, rows=(a, b)), F32)

    def _read3(self, name: str, e: int, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of expert e of a stacked [E, N, K] tensor."""
        return convert(self.store.read_slices(name, slice(e, e + 1), slice(a, b))[0], F32)

    def _transposed(self, name: str, e: int, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of expert e's (out, in) matrix from a stacked (in, out) tensor [E, K, N]."""
        if self.layout.mxfp4:
            return mxfp4_rows(self.store, name, e, a, b)
        block = self.store.read_slices(name, slice(e, e + 1), slice(None), slice(a, b))[0]
        return convert(block, F32, transpose=True)


def mxfp4_rows(store: WeightStore, name: str, e: int, a: int, b: int) -> np.ndarray:
    """Rows [a, b) of expert e dequantized from MXFP4 (`{name}_blocks` [E, N, K/32, 16] uint8, two fp4
    values a byte low nibble first, `{name}_scales` [E, N, K/32] uint8 e8m0): the (out, in) matrix,
    as transformers' `convert_moe_packed_tensors` builds it before transposing."""
    blocks = store.read_slices(f"{name}_blocks", slice(e, e + 1), slice(a, b))[0]  # [n, kb, 16]
    scales = store.read_slices(f"{name}_scales", slice(e, e + 1), slice(a, b))[0].astype(np.int32) - 127  # [n, kb]
    values = np.stack([FP4_VALUES[blocks & 0x0F], FP4_VALUES[blocks >> 4]], axis=-1)  # [n, kb, 16, 2]
    values = values.reshape(*blocks.shape[:2], 32) * np.exp2(scales.astype(np.float32))[..., None]
    return values.reshape(blocks.shape[0], -1).astype(np.float32)


def stacked(
    weights: ExpertWeights, rows: Callable[[int, int, int], np.ndarray], n: int, k: int, cast: Callable, dtype
) -> StreamedTensor:
    """[E, n, k] in the graph dtype, written one expert's row block at a time; `source_rows(a, b)`
    reads rows of the flattened [E*n, k] matrix for the quantizer."""
    count = weights.layout.count

    def blocks() -> Iterator[np.ndarray]:
        for e in range(count):
            for a, b in row_blocks(n, k * 4):
                yield cast(rows(e, a, b))
        tensor.release()

    tensor = StreamedTensor(blocks, dtype, (count, n, k))
    tensor.release = weights.release
    tensor.experts = weights.layout

    def flat_rows(a: int, b: int) -> np.ndarray:
        parts = []
        for e in range(a // n, (b - 1) // n + 1):
            lo, hi = max(a, e * n) - e * n, min(b, (e + 1) * n) - e * n
            parts.append(rows(e, lo, hi))
        return np.concatenate(parts, axis=0)

    tensor.source_rows = flat_rows
    return tensor


def check_layout(store: WeightStore, layout: ExpertLayout, where: str) -> None:
    """Every expert tensor the layout names exists with the expected shape, before any work."""
    E, I, H = layout.count, layout.intermediate, layout.hidden  # noqa: E741
    expected: dict[str, tuple[int, ...]] = {}
    if layout.per_expert:
        for e in range(E):
            gate, up, down = (t.format(e=e) for t in layout.per_expert)
            expected.update({gate: (I, H), up: (I, H), down: (H, I)})
    elif layout.fused:
        expected.update({layout.fused[0]: (E + layout.spare, 2 * I, H), layout.fused[1]: (E, H, I)})
    elif layout.stacked_rows:
        expected.update(dict.fromkeys(layout.stacked_rows, (E * I, H)))
    elif layout.transposed and not layout.mxfp4:
        expected.update({layout.transposed[0]: (E, H, 2 * I), layout.transposed[1]: (E, I, H)})
    elif layout.transposed:
        gate_up, down = layout.transposed
        expected.update({f"{gate_up}_blocks": (E, 2 * I, H // 32, 16), f"{down}_blocks": (E, H, I // 32, 16)})
    check_expert_shapes(store, expected, where, f"{E} experts, intermediate {I}, hidden {H}")


def fused_or_transposed(store: WeightStore, layout: ExpertLayout, where: str) -> ExpertLayout:
    """A fused layout whose names may hold the transposed [gate | up] halves instead (MoeNames
    fused_or_transposed): transformers keeps a tensor of the class's shape ([E, 2I, H], [E, H, I]) and
    transposes any other, so the stored shapes decide. A square gate_up ([E, H, H]) beside a transposed
    down_proj cannot be told apart (transformers would read that gate_up untransposed): refused."""
    E, I, H = layout.count, layout.intermediate, layout.hidden  # noqa: E741
    gate_up, down = layout.fused  # type: ignore[misc]
    if tuple(store.info(gate_up).shape) == (E, 2 * I, H) and tuple(store.info(down).shape) == (E, H, I):
        return layout
    if 2 * I == H and tuple(store.info(down).shape) == (E, I, H):
        raise InputError(
            f"{where}: '{gate_up}' is square ({E} x {H} x {H}) beside a transposed '{down}': whether it is stored "
            "transposed cannot be told from its shape"
        )
    return ExpertLayout(E, I, H, transposed=(gate_up, down), halves=True)


def check_expert_shapes(store: WeightStore, expected: dict[str, tuple[int, ...]], where: str, sizes: str) -> None:
    """InputError naming the first expert tensor whose stored shape is not the config's (`sizes`
    says which config values the shapes came from)."""
    for name, shape in expected.items():
        got = tuple(store.info(name).shape)
        if got != shape:
            raise InputError(
                f"{where}: expert tensor '{name}' has shape {list(got)}, expected {list(shape)} from the config "
                f"({sizes})"
            )
