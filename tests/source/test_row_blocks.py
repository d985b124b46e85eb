"""Every importer read in small row blocks: each block equals the twin's rows (issue #36).

A real checkpoint's linears are streamed a block of output rows at a time (graph/params.py
`row_blocks`, 8 MiB each), but every tiny test weight fits in one block, so a reader that indexes
its scales, zero points, codes or permutation without the block's first row (`a`) is exact on the
tests and wrong after the first block of a real model (the FP8 block-scale bug an independent
mutation check planted, which no test saw). Here every quantized linear of every imported format
(GPTQ v1/v2, AWQ, compressed-tensors pack-quantized and float-quantized per tensor, channel, group
and block, FP8 block and per tensor, bitsandbytes NF4/FP4/int8, Quark, the MoE experts of each) is
read through the build's own `ImportedStore` in blocks of 1, 3, 5 and 7 rows, which start off every
alignment (AWQ's 8 packed rows, FP8's 16/32/48-row scale blocks, bitsandbytes' 64/128-element
blocks that span rows), and the concatenation must equal the twin's float weight bit for bit. The
integer formats' MatMulNBits rows (`packed_rows`, what `--precision` keeps) must equal the whole
read. GGUF's quantized matrices read in row blocks must equal the whole tensor decoded (another
code path: `_whole`). The end-to-end half lowers `CHUNK_BYTES` so that each build really streams
several blocks a linear (recorded), and the package must still equal HF on the twin within 1e-4.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from bnb_models import bnb_pair
from float_quantized_models import ct_fp8_pair, fp8_moe_pair
from prequant_models import awq_pair, fp8_pair, gptq_pair, packed_pair
from quark_models import quark_pair
from safetensors.numpy import load_file

from gqa_export.pipeline import BuildOptions, build
from gqa_export.source.imported import ImportedStore
from gqa_export.source.native import NativeLinear
from gqa_export.source.prequantized import imported_config
from gqa_export.source.weights import WeightStore

STEPS = (1, 3, 5, 7)  # rows per block: every start alignment mod 2, 4, 8, 16, 32, 48
Maker = Callable[[Path], tuple[Path, Path]]
CASES: dict[str, Maker] = {
    "gptq-v1-4bit-act-order": lambda tmp: gptq_pair(tmp, bits=4, group=32, act_order=True),
    "gptq-v2-4bit-g16": lambda tmp: gptq_pair(tmp, bits=4, group=16, act_order=False, v2=True),
    "gptq-v1-2bit": lambda tmp: gptq_pair(tmp, bits=2, group=32, act_order=False),
    "gptq-v1-8bit": lambda tmp: gptq_pair(tmp, bits=8, group=64, act_order=True),
    "awq-gemm": lambda tmp: awq_pair(tmp, group=32),
    "ct-4bit-act-order": lambda tmp: packed_pair(tmp, bits=4, group=32, act_order=True),
    "ct-8bit-channel-sym": lambda tmp: packed_pair(tmp, bits=8, group=-1, sym=True),
    "fp8-block-48": lambda tmp: fp8_pair(tmp, (48, 48)),
    "fp8-block-16x24": lambda tmp: fp8_pair(tmp, (16, 24)),
    "fp8-tensor": lambda tmp: fp8_pair(tmp, None),
    "ct-fp8-tensor": lambda tmp: ct_fp8_pair(tmp, "tensor", "bfloat16"),
    "ct-fp8-channel": lambda tmp: ct_fp8_pair(tmp, "channel", "bfloat16"),
    "ct-fp8-group": lambda tmp: ct_fp8_pair(tmp, "group", "float32"),
    "ct-fp8-block": lambda tmp: ct_fp8_pair(tmp, "block", "float32"),
    "bnb-nf4-double": lambda tmp: bnb_pair(tmp, "nf4", True, 64, "bfloat16"),
    # nested blocks of 8 absmax values: a tiny weight spans several (bitsandbytes' 256 would not)
    "bnb-nf4-nested-8": lambda tmp: bnb_pair(tmp, "nf4", True, 64, "float32", nested=8),
    "bnb-fp4": lambda tmp: bnb_pair(tmp, "fp4", False, 128, "float32"),
    "bnb-int8": lambda tmp: bnb_pair(tmp, "int8", False, 64, "float32"),
    "quark-uint4": lambda tmp: quark_pair(tmp, "uint4", 32, "reorder"),
    "quark-int4": lambda tmp: quark_pair(tmp, "int4", 16, "order", layers={"*.down_proj": 64}),
    "moe-fp8-deepseek-block": lambda tmp: fp8_moe_pair(tmp, "deepseek_v3", "block", (16, 24)),
    "moe-fp8-qwen3-channel": lambda tmp: fp8_moe_pair(tmp, "qwen3_moe", "channel"),
    "moe-gptq-qwen3-act-order": lambda tmp: gptq_pair(tmp, bits=4, group=16, act_order=True, moe="qwen3_moe"),
    "moe-awq-mixtral": lambda tmp: awq_pair(tmp, group=32, moe="mixtral"),
    "moe-ct-8bit-mixtral": lambda tmp: packed_pair(tmp, bits=8, group=32, act_order=True, moe="mixtral"),
    "moe-quark-qwen3": lambda tmp: quark_pair(tmp, "uint4", 32, "reorder", moe="qwen3_moe"),
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Callable[[str], tuple[Path, Path]]:
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            made[name] = CASES[name](tmp_path_factory.mktemp(name))
        return made[name]

    return get


def imported_store(quantized: Path) -> ImportedStore:
    """The store a build reads (plan/model_phase.py), bitsandbytes with --dequantize."""
    raw = json.loads((quantized / "config.json").read_text())
    qc = imported_config(raw, dequantize=True)
    assert qc is not None, quantized
    return ImportedStore(WeightStore.open(quantized), qc)


def in_blocks(read: Callable[[int, int], np.ndarray], n: int, step: int) -> np.ndarray:
    return np.concatenate([read(a, min(n, a + step)) for a in range(0, n, step)])


@pytest.mark.parametrize("name", list(CASES))
def test_every_linear_read_in_row_blocks_equals_the_twin(pairs, name):
    quantized, twin = pairs(name)
    store, expected = imported_store(quantized), load_file(twin / "model.safetensors")
    names = store.virtual()
    assert len(names) >= 14, names  # every quantized linear of the checkpoint
    for weight in names:
        n = store.info(weight).shape[0]
        whole = store.read(weight)
        np.testing.assert_array_equal(whole, expected[weight], err_msg=weight)
        for step in STEPS:
            blocks = in_blocks(lambda a, b, w=weight: store.read(w, rows=(a, b)), n, step)
            np.testing.assert_array_equal(blocks, expected[weight], err_msg=f"{weight} in blocks of {step}")
        native = store.native(weight)
        if native is not None:  # what MatMulNBits / QMoE takes: the checkpoint's own integers
            assert isinstance(native, NativeLinear)
            packed = native.packed_rows(0, n)
            for step in STEPS:
                np.testing.assert_array_equal(in_blocks(native.packed_rows, n, step), packed, err_msg=weight)


def test_gguf_matrices_read_in_row_blocks_equal_the_whole_decode(ggufs):
    """A GGUF store's 2-D tensors (Q4_K / Q6_K blocks of 256, Q8_0 of 32, row-permuted q/k) read in
    row blocks equal the tensor decoded whole, and a linear's decoded codes and scales by blocks
    equal the whole decode."""
    from gqa_export.source.gguf import GgufStore, open_gguf
    from gqa_export.source.gguf.config import read_config

    for types in ("Q4_K_M", "Q8_0"):
        file = open_gguf(ggufs.get("llama256", types))
        store = GgufStore(file, read_config(file)).for_build(False)
        matrices = [n for n in store.names() if len(store.info(n).shape) == 2]
        assert len(matrices) >= 14, matrices
        for weight in matrices:
            n = store.info(weight).shape[0]
            whole = store.read(weight)
            for step in STEPS:
                blocks = in_blocks(lambda a, b, w=weight, s=store: s.read(w, rows=(a, b)), n, step)
                np.testing.assert_array_equal(blocks, whole, err_msg=f"{weight} {types} in blocks of {step}")
            linear = store.linear(weight)
            if linear is not None:
                codes, scales = linear.decoded(0, n)[:2]
                for step in (3, 7):
                    parts = [linear.decoded(a, min(n, a + step)) for a in range(0, n, step)]
                    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), codes, err_msg=weight)
                    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), scales, err_msg=weight)


# (name, precision): every linear (and each expert's) crosses blocks, in the float write (the
# scatter's row bands) and in the quantizer's row blocks
STREAMED = [
    ("fp8-block-16x24", "fp32"),
    ("fp8-block-16x24", "int4"),
    ("ct-fp8-block", "int8"),
    ("bnb-fp4", "fp32"),
    ("moe-fp8-deepseek-block", "fp32"),
]


@pytest.mark.parametrize(("name", "precision"), STREAMED, ids=[f"{n}-{p}" for n, p in STREAMED])
def test_exports_streamed_in_small_row_blocks_equal_the_twin(pairs, tmp_path, monkeypatch, name, precision):
    """The build itself with blocks of a few rows (16 KiB writes, 4 KiB source bands): the
    pre-quantized checkpoint's package holds the twin's package's bytes (the same float weights,
    then the same --precision), where a row-offset bug changes every block after the first."""
    from gqa_export.graph import params

    monkeypatch.setattr(params, "CHUNK_BYTES", 16 * 64)  # 4..16 rows a block at K = 16..64
    monkeypatch.setattr(params, "MAPPED_BYTES", 16 * 64 * 4)  # source bands of 8..16 rows
    starts: list[int] = []
    original = ImportedStore.read_slices

    def recording(self, weight, *index):
        if weight in self._virtual and index and isinstance(index[0], slice):
            starts.append(index[0].indices(self.info(weight).shape[0])[0])
        return original(self, weight, *index)

    monkeypatch.setattr(ImportedStore, "read_slices", recording)
    quantized, twin = pairs(name)
    for source, out in ((quantized, tmp_path / "imported"), (twin, tmp_path / "twin")):
        dequantize = name.startswith("bnb") and source == quantized
        build(BuildOptions(str(source), out, precision=precision, smoke=False, dequantize=dequantize))
    assert sum(a > 0 for a in starts) >= 14 * 2, starts  # blocks that start past a linear's first row
    imported, expected = (
        (tmp_path / "imported" / "model.onnx.data").read_bytes(),
        (tmp_path / "twin" / "model.onnx.data").read_bytes(),
    )
    assert imported == expected
