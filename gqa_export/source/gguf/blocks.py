"""GGML block types read as integer codes, scales and mins in MatMulNBits' terms.

Every integer type this module maps stores, per block of `block` weights along K, an integer code
q, a scale s and (some types) a min m, and means w = s * (q - offset) - m, where `offset` is one
constant of the type. Read that way the codes, scales and mins are the file's own: a scale that
is a product (the K-quants' super-block d times a 6-bit sub-block scale) is computed once in
float32, where it is exact (an fp16 mantissa times an integer of at most 8 bits fits in 24 bits),
and q - offset is an exact integer, so s * (q - offset) - m rounds exactly where the `gguf`
package's dequantizer rounds: the weights are bit for bit the dequantizer's float32 result
(checked per type in tests/source/test_gguf_blocks.py, docs/gguf.md §3).

MatMulNBits stores codes of 2, 4 or 8 bits with a zero point per block; a type's `bits` is the
storage that holds its codes and runs fast on CPU (5- and 6-bit codes go to 8 bits; Q2_K's 2-bit
codes go to 4 bits, since 2-bit MatMulNBits dequantizes every call on CPU: docs/gguf.md §3).
Types with mins have no exact integer zero point (m / s is not an integer), so the layer computes
x·(s∘(q - offset))ᵀ - blocksum(x)·mᵀ instead (quant/gguf_import.py).

Layouts (QK = weights per block; bytes in file order), from ggml's block definitions:
  Q4_0  [d f16][qs 16]: weight j = low nibble of qs[j], j + 16 = high nibble; w = d (q - 8)
  Q4_1  [d][m f16][qs 16]: as Q4_0; w = d q + m
  Q5_0  [d][qh u32][qs 16]: low 4 bits as Q4_0, bit 4 of weight j = bit j of qh; w = d (q - 16)
  Q5_1  [d][m][qh][qs]: w = d q + m
  Q8_0  [d][qs i8 x 32]: w = d q
  Q2_K  [sc 16][qs 64][d][dmin] 256 = 16 x 16: sub-block scale sc & 15, min sc >> 4; w = d sc q - dmin m
  Q3_K  [hmask 32][qs 64][sc 12][d] 16 x 16: 6-bit scales - 32; q = low 2 bits - 4 (bit of hmask clear)
  Q4_K  [d][dmin][sc 12][qs 128] 8 x 32: 6-bit scales and mins; w = d sc q - dmin m
  Q5_K  [d][dmin][sc 12][qh 32][qs 128] 8 x 32: as Q4_K with a fifth bit from qh
  Q6_K  [ql 128][qh 64][sc i8 16][d] 16 x 16: q = ql | qh << 4; w = d sc (q - 32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

QK_K = 256
FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64"})
# read as float by dequantizing them exactly, without --dequantize: the file's values exactly, and
# no other form exists (gpt-oss's experts are MXFP4 in every GGUF, as in its safetensors)
EXACT_FLOAT_TYPES = frozenset({"MXFP4"})

Decoded = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # codes uint8 [R, K], scales f32 [R, K/block], mins


@dataclass(frozen=True)
class BlockForm:
    """How one GGML type's blocks become MatMulNBits codes (see module doc)."""

    type_name: str
    bits: int  # MatMulNBits storage bits
    block: int  # MatMulNBits block_size: weights sharing one scale (and min)
    offset: int  # the zero point every block has
    mins: bool  # w = s (q - offset) - m, m per block
    source_bits: float  # the file's bits per weight, for the manifest and `inspect`
    decode: Callable[[np.ndarray], Decoded]  # uint8 blocks [R, nb, type_size] -> codes, scales, mins


def _f16(raw: np.ndarray) -> np.ndarray:
    """[..., 2] bytes -> float32 [...]."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _nibbles_halves(qs: np.ndarray) -> np.ndarray:
    """[R, nb, 16] bytes -> [R, nb, 32]: low nibbles are weights 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _bits_u32(qh: np.ndarray) -> np.ndarray:
    """[R, nb, 4] bytes (a little-endian uint32) -> [R, nb, 32]: bit j of the word for weight j."""
    return np.unpackbits(qh, axis=-1, bitorder="little")


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.reshape(x.shape[0], -1))


def _q4_0(b: np.ndarray) -> Decoded:
    return _flat(_nibbles_halves(b[..., 2:18])), _flat(_f16(b[..., 0:2])), None


def _q4_1(b: np.ndarray) -> Decoded:
    return _flat(_nibbles_halves(b[..., 4:20])), _flat(_f16(b[..., 0:2])), _flat(-_f16(b[..., 2:4]))


def _q5(b: np.ndarray, head: int) -> np.ndarray:
    """Q5_0 / Q5_1 codes 0..31: low nibbles from qs, the fifth bit from qh (after `head` bytes)."""
    low = _nibbles_halves(b[..., head + 4 : head + 20])
    return low | (_bits_u32(b[..., head : head + 4]) << 4)


def _q5_0(b: np.ndarray) -> Decoded:
    return _flat(_q5(b, 2) + np.uint8(112)), _flat(_f16(b[..., 0:2])), None  # q - 16 + 128


def _q5_1(b: np.ndarray) -> Decoded:
    return _flat(_q5(b, 4)), _flat(_f16(b[..., 0:2])), _flat(-_f16(b[..., 2:4]))


def _q8_0(b: np.ndarray) -> Decoded:
    return _flat(b[..., 2:34] ^ np.uint8(0x80)), _flat(_f16(b[..., 0:2])), None  # int8 q + 128


def _crumbs(qs: np.ndarray, groups: int) -> np.ndarray:
    """[R, nb, 32 * groups] bytes of 2-bit fields -> [R, nb, 128 * groups]: in each run of 32
    bytes, shift s (0, 2, 4, 6) gives the next 32 weights."""
    r, nb = qs.shape[:2]
    runs = qs.reshape(r, nb, groups, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1)
    return (runs & 3).reshape(r, nb, groups * 128)


def _q2_k(b: np.ndarray) -> Decoded:
    sc = b[..., 0:16]
    q = _crumbs(b[..., 16:80], 2)
    d, dmin = _f16(b[..., 80:82])[..., None], _f16(b[..., 82:84])[..., None]
    return _flat(q), _flat(d * (sc & 0x0F).astype(np.float32)), _flat(dmin * (sc >> 4).astype(np.float32))


def _q3_k_scales(raw: np.ndarray) -> np.ndarray:
    """12 bytes -> 16 six-bit scales, minus 32 (ggml's Q3_K packing)."""
    r, nb = raw.shape[:2]
    low = (raw[..., 0:8].reshape(r, nb, 1, 8) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 0x0F
    high = (raw[..., 8:12].reshape(r, nb, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 0x03
    return (low.reshape(r, nb, 16) | (high.reshape(r, nb, 16) << 4)).astype(np.int8) - np.int8(32)


def _q3_k(b: np.ndarray) -> Decoded:
    r, nb = b.shape[:2]
    hmask = b[..., 0:32]
    low = _crumbs(b[..., 32:96], 2)  # [R, nb, 256]
    high = (hmask.reshape(r, nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)) & 1
    q = low + (high.reshape(r, nb, 256) << 2) + np.uint8(4)  # (low - 4 * (1 - bit)) + 8, in 4..11
    scales = _f16(b[..., 108:110])[..., None] * _q3_k_scales(b[..., 96:108]).astype(np.float32)
    return _flat(q), _flat(scales), None


def k_scale_min(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins (ggml's get_scale_min_k4)."""
    d, m, md = raw[..., 0:4], raw[..., 4:8], raw[..., 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """[R, nb, 128] -> [R, nb, 256]: each run of 32 bytes gives 32 weights (low) then 32 (high)."""
    r, nb = qs.shape[:2]
    runs = qs.reshape(r, nb, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)
    return (runs & 0x0F).reshape(r, nb, 256)


def _k_scales_mins(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sc, mn = k_scale_min(b[..., 4:16])
    d, dmin = _f16(b[..., 0:2])[..., None], _f16(b[..., 2:4])[..., None]
    return _flat(d * sc.astype(np.float32)), _flat(dmin * mn.astype(np.float32))


def _q4_k(b: np.ndarray) -> Decoded:
    return (_flat(_k_nibbles(b[..., 16:144])), *_k_scales_mins(b))


def _q5_k(b: np.ndarray) -> Decoded:
    r, nb = b.shape[:2]
    high = (b[..., 16:48].reshape(r, nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)) & 1
    q = _k_nibbles(b[..., 48:176]) | (high.reshape(r, nb, 256) << 4)
    return (_flat(q), *_k_scales_mins(b))


def _q6_k(b: np.ndarray) -> Decoded:
    r, nb = b.shape[:2]
    ql = (b[..., 0:128].reshape(r, nb, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)) & 0x0F
    qh = _crumbs(b[..., 128:192], 2)
    q = ql.reshape(r, nb, 256) | (qh << 4)
    scales = _f16(b[..., 208:210])[..., None] * b[..., 192:208].view(np.int8).astype(np.float32)
    return _flat(q + np.uint8(96)), _flat(scales), None  # q - 32 + 128


FORMS: dict[str, BlockForm] = {
    f.type_name: f
    for f in (
        BlockForm("Q8_0", 8, 32, 128, False, 8.5, _q8_0),
        BlockForm("Q4_0", 4, 32, 8, False, 4.5, _q4_0),
        BlockForm("Q4_1", 4, 32, 0, True, 5.0, _q4_1),
        BlockForm("Q5_0", 8, 32, 128, False, 5.5, _q5_0),
        BlockForm("Q5_1", 8, 32, 0, True, 6.0, _q5_1),
        BlockForm("Q2_K", 4, 16, 0, True, 2.625, _q2_k),
        BlockForm("Q3_K", 4, 16, 8, False, 3.4375, _q3_k),
        BlockForm("Q4_K", 4, 32, 0, True, 4.5, _q4_k),
        BlockForm("Q5_K", 8, 32, 0, True, 5.5, _q5_k),
        BlockForm("Q6_K", 8, 16, 128, False, 6.5625, _q6_k),
    )
}


def type_sizes(type_name: str) -> tuple[int, int]:
    """(weights per block, bytes per block) of a GGML type."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    return GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]


def decode_rows(form: BlockForm, raw_rows: np.ndarray) -> Decoded:
    """Rows of a quantized matrix (uint8 [R, bytes per row]) -> codes [R, K], scales and mins [R, K / block]."""
    size = type_sizes(form.type_name)[1]
    blocks = np.ascontiguousarray(raw_rows).reshape(raw_rows.shape[0], -1, size)
    return form.decode(blocks)


def dequantize_rows(type_name: str, raw_rows: np.ndarray) -> np.ndarray:
    """Rows of any GGML-typed matrix as float32 [R, K], exactly as the `gguf` package dequantizes them."""
    if type_name in ("F32", "F16", "F64"):
        return np.asarray(raw_rows, dtype=np.float32)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    return dequantize(np.ascontiguousarray(raw_rows), GGMLQuantizationType[type_name])


def weights(form: BlockForm, decoded: Decoded) -> np.ndarray:
    """float32 [R, K] that the codes mean: s * (q - offset) - m, per block (what MatMulNBits plus
    the min correction compute, weight by weight)."""
    codes, scales, mins = decoded
    r, k = codes.shape
    q = codes.reshape(r, -1, form.block).astype(np.float32) - np.float32(form.offset)
    w = scales[..., None] * q
    if mins is not None:
        w = w - mins[..., None]
    return w.reshape(r, k)


def zero_points_and_residual(form: BlockForm, scales: np.ndarray, mins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A form with mins (w = s q - m per block, offset 0) as w = s (q - z) + r: the integer zero
    point z = round(m / s) clipped to the codes' range (uint8 [R, K / block]) and the residual
    r = s z - m (float32, |r| <= s / 2 unless clipped) that a block-sum term adds (docs/gguf.md §3.2)."""
    assert form.mins and form.offset == 0, form.type_name
    top = (1 << form.bits) - 1
    z = np.clip(np.rint(np.divide(mins, scales, out=np.zeros_like(mins), where=scales != 0)), 0, top)
    return z.astype(np.uint8), scales * z.astype(np.float32) - mins
