"""A pre-quantized linear's own integers, scales and zero points in MatMulNBits' layout.

GPTQ, AWQ and compressed-tensors pack-quantized store each quantized Linear `P` as integer codes
plus per-group scales and zero points instead of `P.weight` (docs/prequantized.md §3).
`NativeLinear` reads them in row blocks of the output dimension N, as the MatMulNBits blobs
(`packed_rows`), and also as float (`dequantized_rows`), which is what the checkpoint means and
what every path that does not import the integers reads. Nothing is re-rounded: the codes are moved, never recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gqa_export.errors import InputError
from gqa_export.source.weights import WeightStore

# AWQ GEMM packs column 8c + AWQ_ORDER[i] into nibble i of word c (docs/prequantized.md §3)
AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])


def why_not_gptq(qc: dict[str, Any]) -> str | None:
    """None when the GPTQ config is imported as it is (docs/prequantized.md §1), else what is not."""
    bits = qc.get("bits", 4)
    if bits not in (2, 4, 8):
        return f"{bits}-bit GPTQ (2, 4 and 8 bits are imported)"
    if qc.get("dynamic"):
        return "GPTQ with per-module `dynamic` overrides"
    if str(qc.get("checkpoint_format") or qc.get("format") or "gptq") not in ("gptq", "gptq_v2"):
        return f"GPTQ checkpoint_format {qc.get('checkpoint_format') or qc.get('format')!r}"
    return None


def why_not_awq(qc: dict[str, Any]) -> str | None:
    """AWQ: only 4-bit GEMM with zero points."""
    version = str(qc.get("version") or qc.get("format") or "gemm").lower()
    if version != "gemm" or qc.get("bits", 4) != 4:
        return f"AWQ {version} {qc.get('bits', 4)}-bit (only 4-bit GEMM is imported)"
    if qc.get("zero_point") is False:
        return "AWQ without zero points"
    return None


def why_not_pack_quantized(qc: dict[str, Any]) -> str | None:
    """compressed-tensors: only `pack-quantized` int4/int8 weights, group or channel, weight-only
    (a config whose groups are all float-quantized is the FP8 format: source/fp8.py)."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        return "compressed-tensors without config_groups"
    bits = set()
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        fmt = str((group or {}).get("format") or qc.get("format") or "")
        if fmt != "pack-quantized":
            return f"compressed-tensors format {fmt!r} (pack-quantized int4/int8 and float-quantized FP8 are imported)"
        if weights.get("type", "int") != "int" or weights.get("num_bits") not in (4, 8):
            return f"compressed-tensors {weights.get('type')} {weights.get('num_bits')}-bit weights"
        if weights.get("strategy") not in ("group", "channel"):
            return f"compressed-tensors strategy {weights.get('strategy')!r} (group and channel are imported)"
        if weights.get("actorder") not in (None, "weight", "group"):
            return f"compressed-tensors actorder {weights.get('actorder')!r}"
        if (group or {}).get("input_activations"):
            return "compressed-tensors with quantized activations (only weight-only W4A16/W8A16 is imported)"
        bits.add(int(weights["num_bits"]))
    if len(bits) > 1:
        return "compressed-tensors with several weight bit widths"
    return None


def unpack_fields(u8: np.ndarray, bits: int) -> np.ndarray:
    """uint8 [..., M] -> [..., M * 8 / bits] fields, lowest bits first (MatMulNBits' and GPTQ's order)."""
    if bits == 8:
        return u8.copy()
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((u8[..., None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(*u8.shape[:-1], -1)


def pack_fields(q: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of `unpack_fields`: [..., M] integers < 2^bits -> uint8 [..., ceil(M * bits / 8)]."""
    if bits == 8:
        return q.astype(np.uint8)
    per = 8 // bits
    pad = -q.shape[-1] % per
    if pad:
        q = np.concatenate([q, np.zeros((*q.shape[:-1], pad), q.dtype)], axis=-1)
    fields = q.astype(np.uint8).reshape(*q.shape[:-1], -1, per)
    out = np.zeros(fields.shape[:-1], np.uint8)
    for j in range(per):
        out |= fields[..., j] << np.uint8(bits * j)
    return out


def pad_to_blocks(q: np.ndarray, width: int, fill: int) -> np.ndarray:
    """q [..., K] with `fill` columns appended up to `width` (whole MatMulNBits blocks)."""
    if q.shape[-1] == width:
        return q
    return np.concatenate([q, np.full((*q.shape[:-1], width - q.shape[-1]), fill, q.dtype)], axis=-1)


def words_as_bytes(words: np.ndarray) -> np.ndarray:
    """int32 words [..., W] as their little-endian bytes [..., 4W]."""
    return np.ascontiguousarray(words).astype("<i4", copy=False).view(np.uint8)


def matmul_block_size(group: int, k: int) -> int:
    """MatMulNBits' block size for a quantization group: the group itself when it is a power of two
    from 16, else the largest power of two <= 128 that divides it (a per-channel group is then
    split into blocks that repeat its scale and zero point: same values)."""
    if group >= 16 and group & (group - 1) == 0:
        return group
    for bs in (128, 64, 32, 16):
        if group % bs == 0 and k % bs == 0:
            return bs
    raise InputError(
        f"quantization group size {group} (K={k}) has no power-of-two MatMulNBits block (16-128) dividing it; "
        "this checkpoint cannot be imported without re-quantizing: export its float checkpoint instead"
    )


@dataclass
class NativeLinear:
    """One quantized linear W [N, K]: codes q [N, K], per-group scales and zero points, groups of
    `group` consecutive input rows after the input permutation `perm` (act-order, else None)."""

    name: str  # the virtual float weight, `P.weight`
    fmt: str  # "gptq v1", "gptq v2", "awq gemm"
    store: WeightStore
    prefix: str
    n: int
    k: int
    bits: int
    group: int
    block_size: int
    # (scales float32 [N, G], zero points uint8 [N, G] or None when all are the op's default
    # 2^(bits-1)), read from the checkpoint on each call and not kept: memory stays bounded
    params: Callable[[], tuple[np.ndarray, np.ndarray | None]]
    perm: np.ndarray | None  # int64 [K]: position t of the node's input is original row perm[t]
    symmetric: bool = False  # no zero-point input (every zero point is the default)
    # its input quantized per token to int<bits> absmax before the product (BitNet), 0: float input
    activation_bits: int = 0

    def __post_init__(self) -> None:
        self.symmetric = self.params()[1] is None

    @property
    def k_blocks(self) -> int:
        return -(-self.k // self.block_size)  # a last block padded where K is not whole blocks (BitNet)

    @property
    def repeat(self) -> int:
        return self.group // self.block_size

    def codes(self, a: int, b: int) -> np.ndarray:
        """q [b - a, K] uint8 in the checkpoint's K order (output rows a..b)."""
        raise NotImplementedError

    def packed_rows(self, a: int, b: int) -> np.ndarray:
        """MatMulNBits B for output rows a..b: uint8 [b - a, k_blocks, block_size * bits / 8]."""
        q = self.codes(a, b)
        if self.perm is not None:
            q = q[:, self.perm]
        q = pad_to_blocks(q, self.k_blocks * self.block_size, 0)  # MatMulNBits reads no input past K
        return pack_fields(q, self.bits).reshape(b - a, self.k_blocks, self.block_size * self.bits // 8)

    def block_scales(self) -> np.ndarray:
        """float32 [N, k_blocks]."""
        return np.repeat(self.params()[0], self.repeat, axis=1)

    def block_zero_points(self) -> np.ndarray:
        """uint8 [N, k_blocks], the default 2^(bits-1) filled in when symmetric."""
        zero_points = self.params()[1]
        if zero_points is None:
            return np.full((self.n, self.k_blocks), 1 << (self.bits - 1), np.uint8)
        return np.repeat(zero_points, self.repeat, axis=1)

    def block_residual(self) -> np.ndarray | None:
        """float32 [N, k_blocks] added to every weight of a block after (q - z) * s, or None (a GGUF
        min's remainder: source/gguf/store.py; the checkpoint formats have none)."""
        return None

    def dequantized_rows(self, a: int, b: int) -> np.ndarray:
        """W [b - a, K] float32 = (q - z) * s, each input row in its own group (what the checkpoint means)."""
        q = self.codes(a, b).astype(np.float32)
        group_of = np.arange(self.k) // self.group
        if self.perm is not None:  # row perm[t] is in group t // group
            group_of = np.empty(self.k, np.int64)
            group_of[self.perm] = np.arange(self.k) // self.group
        scales, zp = self.params()
        if zp is None:
            zp = np.full(scales.shape, 1 << (self.bits - 1), np.uint8)
        z = zp[a:b].astype(np.float32)[:, group_of]
        return (q - z) * scales[a:b][:, group_of]


class GptqLinear(NativeLinear):
    """GPTQ: qweight int32 [K*b/32, N] packed along K, qzeros int32 [G, N*b/32] packed along N
    (v1 stores zero - 1), scales [G, N], g_idx [K] (docs/prequantized.md §3.1)."""

    def codes(self, a: int, b: int) -> np.ndarray:
        words = self.store.read(f"{self.prefix}.qweight", cols=(a, b))  # [K*b/32, b - a]
        return unpack_fields(words_as_bytes(words.T), self.bits)[:, : self.k]


class AwqLinear(NativeLinear):
    """AWQ GEMM: qweight int32 [K, N/8] packed along N in AWQ_ORDER, same for qzeros [G, N/8]
    (no zero-point offset), scales [G, N] (docs/prequantized.md §3.2)."""

    def codes(self, a: int, b: int) -> np.ndarray:
        c0, c1 = a // 8, (b + 7) // 8
        words = self.store.read(f"{self.prefix}.qweight", cols=(c0, c1))  # [K, c1 - c0]
        q = awq_unpack(words)  # [K, 8 * (c1 - c0)]
        return np.ascontiguousarray(q[:, a - 8 * c0 : b - 8 * c0].T)


def awq_unpack(words: np.ndarray) -> np.ndarray:
    """int32 [R, W] in AWQ's interleaved nibble order -> uint8 [R, 8W] in column order."""
    nibbles = ((words.astype(np.int64)[..., None] >> (4 * np.arange(8))) & 0xF).astype(np.uint8)
    out = np.empty_like(nibbles)
    out[..., AWQ_ORDER] = nibbles
    return out.reshape(words.shape[0], -1)


def gptq_linear(store: WeightStore, prefix: str, qc: dict, v1: bool) -> GptqLinear:
    """One GPTQ linear from its tensors and the checkpoint's quantization_config."""
    bits = int(qc.get("bits", 4))
    qweight = store.info(f"{prefix}.qweight")
    n, k = qweight.shape[1], qweight.shape[0] * 32 // bits
    group = int(qc.get("group_size", -1))
    group = k if group <= 0 else group
    # a last partial group (K not whole groups: GPTQ's g_idx is i // group_size, its scales ceil(K / group) rows)
    # is MatMulNBits' padded last block, where the group is one block (a power of two from 16)
    if k % group and not (group >= 16 and group & (group - 1) == 0):
        raise InputError(
            f"{prefix}: K={k} is not a whole number of GPTQ groups of {group}, and a last partial group is imported "
            "only for a power-of-two group size from 16 (one MatMulNBits block); export the float checkpoint instead"
        )
    groups = store.info(f"{prefix}.scales").shape[0]
    if groups != -(-k // group):
        raise InputError(f"{prefix}.scales has {groups} groups; K={k} in groups of {group} makes {-(-k // group)}")

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        scales = np.ascontiguousarray(store.read(f"{prefix}.scales").astype(np.float32).T)  # [N, G]
        zeros = unpack_fields(words_as_bytes(store.read(f"{prefix}.qzeros")), bits)[:, :n]  # [G, N]
        z = ((zeros.astype(np.int32) + (1 if v1 else 0)) & ((1 << bits) - 1)).astype(np.uint8).T
        return scales, _or_default(np.ascontiguousarray(z), bits)

    g_idx = store.read(f"{prefix}.g_idx") if f"{prefix}.g_idx" in store else None
    perm = act_order_permutation(g_idx, group, k, f"{prefix}.g_idx")
    return GptqLinear(
        f"{prefix}.weight", "gptq v1" if v1 else "gptq v2", store, prefix, n, k, bits, group,
        matmul_block_size(group, k), params, perm,
    )  # fmt: skip


def read_gptq(store: WeightStore, prefix: str, qc: dict) -> GptqLinear:
    """One GPTQ linear; `checkpoint_format` (or `format`) gptq is v1, gptq_v2 is v2."""
    fmt = str(qc.get("checkpoint_format") or qc.get("format") or "gptq")
    return gptq_linear(store, prefix, qc, v1=fmt == "gptq")


def act_order_permutation(g_idx: np.ndarray | None, group: int, k: int, name: str) -> np.ndarray | None:
    """The input permutation that makes act-order groups contiguous (None when they already are):
    position t reads input row perm[t] (docs/prequantized.md §3.3)."""
    if g_idx is None:
        return None
    g_idx = g_idx.astype(np.int64)
    if np.array_equal(g_idx, np.arange(k) // group):
        return None
    perm = np.argsort(g_idx, kind="stable")
    if not np.array_equal(g_idx[perm], np.arange(k) // group):
        raise InputError(
            f"{name} does not put exactly {group} input rows in each group; it cannot be imported as a "
            "permutation: export the float checkpoint instead"
        )
    return perm


class PackedLinear(NativeLinear):
    """compressed-tensors pack-quantized: weight_packed int32 [N, ceil(K*b/32)] along K, codes
    stored unsigned (q + 2^(b-1)); weight_zero_point int32 [ceil(N*b/32), G] along N, stored the
    same way, absent when symmetric (docs/prequantized.md §3.5)."""

    def codes(self, a: int, b: int) -> np.ndarray:
        words = self.store.read(f"{self.prefix}.weight_packed", rows=(a, b))
        return unpack_fields(words_as_bytes(words), self.bits)[:, : self.k]


def packed_linear(store: WeightStore, prefix: str, bits: int) -> PackedLinear:
    n, k = (int(v) for v in store.read(f"{prefix}.weight_shape").reshape(-1)[:2])
    groups = int(np.prod(store.info(f"{prefix}.weight_scale").shape)) // n
    group = k // max(1, groups)
    if group * groups != k:
        raise InputError(f"{prefix}: K={k} is not a whole number of groups; cannot import it exactly")

    stored_zero_points = f"{prefix}.weight_zero_point" in store  # asked now: the store hides it later

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        scales = np.ascontiguousarray(store.read(f"{prefix}.weight_scale").astype(np.float32).reshape(n, -1))
        if not stored_zero_points:
            return scales, None
        return scales, _or_default(packed_zero_points(store.read(f"{prefix}.weight_zero_point"), bits, n), bits)

    g_idx = store.read(f"{prefix}.weight_g_idx") if f"{prefix}.weight_g_idx" in store else None
    return PackedLinear(
        f"{prefix}.weight", "compressed-tensors pack-quantized", store, prefix, n, k, bits, group,
        matmul_block_size(group, k), params, act_order_permutation(g_idx, group, k, f"{prefix}.weight_g_idx"),
    )  # fmt: skip


def read_pack_quantized(store: WeightStore, prefix: str, qc: dict) -> PackedLinear:
    """One pack-quantized linear at the config's one bit width (why_not_pack_quantized allows one)."""
    bits = next(iter(qc["config_groups"].values()))["weights"]["num_bits"]
    return packed_linear(store, prefix, int(bits))


def packed_zero_points(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """compressed-tensors zero points int32 [ceil(N*b/32), G], packed along N (dim 0) -> uint8 [N, G]."""
    return np.ascontiguousarray(unpack_fields(words_as_bytes(words.T), bits)[:, :n].T)


def awq_linear(store: WeightStore, prefix: str, qc: dict) -> AwqLinear:
    qweight = store.info(f"{prefix}.qweight")
    k, n = qweight.shape[0], qweight.shape[1] * 8
    groups = store.info(f"{prefix}.scales").shape[0]
    group, size = k // groups, int(qc.get("group_size", 0) or 0)
    if group * groups != k or (size > 0 and k % size):  # AutoAWQ's layers hold whole groups only
        of = f" of {size}" if size > 0 else ""
        raise InputError(f"{prefix}: K={k} is not a whole number of AWQ groups{of}; cannot import it exactly")

    def params() -> tuple[np.ndarray, np.ndarray | None]:
        scales = np.ascontiguousarray(store.read(f"{prefix}.scales").astype(np.float32).T)  # [N, G]
        z = np.ascontiguousarray(awq_unpack(store.read(f"{prefix}.qzeros")).T)  # [N, G]
        return scales, _or_default(z, 4)

    return AwqLinear(
        f"{prefix}.weight", "awq gemm", store, prefix, n, k, 4, group, matmul_block_size(group, k), params, None
    )


def _or_default(z: np.ndarray, bits: int) -> np.ndarray | None:
    """None where every zero point is the op's default 2^(bits-1): same values, faster kernel."""
    return None if bool((z == (1 << (bits - 1))).all()) else z
