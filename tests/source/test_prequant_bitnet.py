"""BitNet b1.58's packed ternary checkpoints (`quant_method: bitnet`) imported as 2-bit MatMulNBits.

The checkpoints are tiny float BitNets ternarized and packed by transformers' own `pack_weights`
(tests/bitnet_models.py), in both linear classes (BitLinear divides by its weight_scale,
AutoBitLinear multiplies). HF runs them through BitLinear / AutoBitLinear, int8 absmax activations
per token included, and the package must equal that within the project's 1e-4 (prompt and decode
steps, a 1-token prompt), generate HF's greedy tokens through onnxruntime-genai, and hold the
checkpoint's codes unchanged as 2-bit codes with a zero point of 1. Each part of the import has a
mutant that breaks parity: the codes off by one, the zero point 2 (the op's default), the scale
inverted, the activation quantization left out. docs/prequantized.md §3.10.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from bitnet_models import save_bitnet_packed
from families import PROMPT
from mutants import copy_package, edit_initializers
from onnx import numpy_helper
from reference import assert_varied, genai_prompt_then_greedy, hf_generate, hf_model, parity_error

from gqa_export.pipeline import BuildOptions, build
from gqa_export.source import bitnet
from gqa_export.source.weights import WeightStore

BOUND = 1e-4
# name -> (linear_class, config overrides); the hub's 2B-4T is AutoBitLinear with a tied table
VARIANTS = {
    "bitlinear": ("bitlinear", {}),
    "autobitlinear": ("autobitlinear", {}),
    "autobitlinear_tied": ("autobitlinear", {"tie_word_embeddings": True}),
}
LINEARS = 21  # 3 layers x q, k, v, o, gate, up, down


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out: dict[str, tuple[Path, Path]] = {}
    for name, (linear_class, overrides) in VARIANTS.items():
        tmp = tmp_path_factory.mktemp(name)
        checkpoint = save_bitnet_packed(tmp / "ckpt", linear_class, **overrides)
        out[name] = (checkpoint, export(checkpoint, tmp / "pkg"))
    return out


def export(src: Path, out: Path, precision: str = "fp32", smoke: bool = False) -> Path:
    build(BuildOptions(str(src), out, precision=precision, smoke=smoke))
    return out


def nbits_nodes(package: Path) -> list[onnx.NodeProto]:
    graph = onnx.load(str(package / "model.onnx"), load_external_data=False).graph
    return [n for n in graph.node if n.op_type == "MatMulNBits"]


def attributes(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: a.i for a in node.attribute}


@pytest.mark.parametrize("name", VARIANTS)
def test_packed_bitnet_equals_hf(made, name):
    checkpoint, package = made[name]
    linear_class = VARIANTS[name][0]
    assert parity_error(package, checkpoint) < BOUND
    assert parity_error(package, checkpoint, [0]) < BOUND  # a 1-token prompt
    nodes = nbits_nodes(package)
    assert len(nodes) == 15  # per layer: packed qkv, o, gate, up, down (gate/up apart on CPU)
    assert {(attributes(n)["bits"], attributes(n)["accuracy_level"]) for n in nodes} == {(2, 0)}
    # the largest block dividing K: hidden 64 (q|k|v, o, gate, up), intermediate 96 = 3 x 32 (down)
    assert {(attributes(n)["K"], attributes(n)["block_size"]) for n in nodes} == {(64, 64), (96, 32)}
    assert all(len(n.input) == 4 for n in nodes)  # the zero point 1 is not the op's default 2
    imported = json.loads((package / "manifest.json").read_text())["options"]["imported_quantization"]
    assert imported["source_format"] == "BitNet" and len(imported["imported"]) == LINEARS
    assert not imported["dequantized"]
    assert all(v.startswith(f"bitnet {linear_class} 2-bit") for v in imported["imported"].values())


def test_packed_bitnet_codes_are_the_checkpoints(made):
    """The package's 2-bit codes of q|k|v are transformers' own unpacking of the stored bytes, + 1."""
    import torch
    from transformers.integrations.bitnet import unpack_weights

    checkpoint, package = made["bitlinear"]
    store = WeightStore.open(checkpoint)
    graph = onnx.load(str(package / "model.onnx"))
    qkv = next(t for t in graph.graph.initializer if t.name == "model.layers.1.self_attn.qkv_proj.qweight")
    codes = np.stack([(numpy_helper.to_array(qkv) >> (2 * j)) & 3 for j in range(4)], axis=-1).reshape(128, 64)
    stored = [store.read(f"model.layers.1.self_attn.{m}_proj.weight") for m in "qkv"]
    ternary = [unpack_weights.__wrapped__(torch.from_numpy(s), torch.float32).numpy() for s in stored]
    assert np.array_equal(codes, np.concatenate(ternary) + 1)


def test_packed_bitnet_genai_greedy_tokens_equal_hf(made):
    checkpoint, package = made["bitlinear"]
    _, tokens = genai_prompt_then_greedy(package, list(PROMPT), 12)
    assert tokens == hf_generate(hf_model(checkpoint), list(PROMPT), 12)
    assert_varied([tokens])


def test_packed_bitnet_int4_writes_the_ternary_codes_as_4_bit(made, tmp_path):
    """--precision int4: the ternary codes become 4-bit codes (t + 8, the op's default zero point: no
    zero-point input), still at accuracy level 0 (level 4 would quantize the rounded activations
    again per block), the same weights on the fast 4-bit kernel: with the lm_head kept float the
    package still equals HF; by default the lm_head is int4 too and the smoke run generates."""
    from gqa_export.request.records import QuantOptions

    checkpoint, _ = made["bitlinear"]
    kept = tmp_path / "kept"
    build(BuildOptions(str(checkpoint), kept, precision="int4", quant=QuantOptions(keep_float=("lm_head.weight",)),
                       smoke=False))  # fmt: skip
    nodes = nbits_nodes(kept)
    assert [(attributes(n)["bits"], attributes(n)["accuracy_level"], len(n.input)) for n in nodes] == [(4, 0, 3)] * 15
    assert parity_error(kept, checkpoint) < BOUND
    imported = json.loads((kept / "manifest.json").read_text())["options"]["imported_quantization"]["imported"]
    assert all("2-bit" in v and "as 4-bit codes" in v for v in imported.values()) and len(imported) == LINEARS
    broken = copy_package(kept, tmp_path / "mutant")  # every 4-bit code + 1: the offset 8 taken as 9
    assert edit_initializers(broken, "*.qweight", lambda q: q + np.uint8(0x11))
    assert parity_error(broken, checkpoint) > 10 * BOUND
    package = export(checkpoint, tmp_path / "pkg", precision="int4", smoke=True)
    bits = sorted((attributes(n)["bits"], attributes(n)["accuracy_level"]) for n in nbits_nodes(package))
    assert bits == [(4, 0)] * 15 + [(4, 4)]


def test_reader_rows_across_the_packed_shifts(tmp_path):
    """Rows a..b that cross the stored row's shifts read as transformers unpacks them."""
    import torch
    from safetensors.numpy import save_file
    from transformers.integrations.bitnet import pack_weights, unpack_weights

    ternary = torch.from_numpy(np.random.default_rng(3).integers(-1, 2, (24, 32)).astype(np.float32))
    packed = pack_weights(ternary.clone()).numpy()
    save_file(
        {"m.proj.weight": packed, "m.proj.weight_scale": np.array([4.0], np.float32)}, str(tmp_path / "m.safetensors")
    )
    linear = bitnet.bitnet_linear(WeightStore.open(tmp_path), "m.proj", {"linear_class": "bitlinear"})
    unpacked = unpack_weights.__wrapped__(torch.from_numpy(packed), torch.float32).numpy()
    assert np.array_equal(linear.codes(5, 19), unpacked[5:19] + 1)
    assert np.array_equal(linear.dequantized_rows(0, 24), unpacked / 4.0)
    assert (linear.n, linear.k, linear.block_size) == (24, 32, 32)


# an odd hidden size: every K (40 and 72) takes 16-blocks with a padded last one
ODD_SIZES = dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=1, head_dim=8, intermediate_size=72,
                 num_hidden_layers=2)  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_k_not_whole_blocks_equals_hf_as_2_bit_and_4_bit_codes(tmp_path, precision):
    """Hidden 40 / intermediate 72 end to end: the padded last block as the checkpoint's 2-bit codes and,
    at int4, as 4-bit codes padded with the op's zero (8); each equals HF. Mutant: the last block's
    bytes rolled by one (the codes a field off inside the padded block) breaks parity."""
    from gqa_export.request.records import QuantOptions

    checkpoint = save_bitnet_packed(tmp_path / "ckpt", **ODD_SIZES)
    package = tmp_path / "pkg"
    kept = QuantOptions(keep_float=("lm_head.weight",)) if precision == "int4" else QuantOptions()
    build(BuildOptions(str(checkpoint), package, precision=precision, smoke=False, quant=kept))
    bits = {attributes(n)["bits"] for n in nbits_nodes(package)}
    assert bits == {2 if precision == "fp32" else 4}
    assert {attributes(n)["K"] % 16 for n in nbits_nodes(package)} == {8}  # 40 and 72: a half block
    assert parity_error(package, checkpoint) < BOUND

    def roll_last_block(q: np.ndarray) -> np.ndarray:
        q = q.copy()
        q[:, -1] = np.roll(q[:, -1], 1, axis=-1)
        return q

    broken = copy_package(package, tmp_path / "mutant")
    assert edit_initializers(broken, "*.qweight", roll_last_block)
    assert parity_error(broken, checkpoint) > 10 * BOUND


def _without_activation_quantization(package: Path) -> int:
    """Every MatMulNBits fed the float activations (the int8 per-token rounding left out)."""
    path = package / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    source = {n.output[0]: n for n in model.graph.node}
    changed = 0
    for node in model.graph.node:
        if node.op_type == "MatMulNBits" and "activation_int8" in source[node.input[0]].name:
            abs_node = next(n for n in model.graph.node if n.op_type == "Abs" and n.name.startswith(
                source[node.input[0]].name.rpartition("/")[0]))  # fmt: skip
            node.input[0] = abs_node.input[0]
            changed += 1
    onnx.save(model, str(path))
    return changed


MUTANTS = {
    "codes-off-by-one": ("*.qweight", lambda q: q + np.uint8(0b01010101)),  # every 2-bit field + 1
    "zero-point-2": ("*.zero_points", lambda z: z << 1),  # 1 -> 2, the op's default
    "scale-inverted": ("*.scales", lambda s: 1 / s),
}


@pytest.mark.parametrize("mutant", [*MUTANTS, "activation-quantization-dropped"])
def test_mutant_packed_bitnet_fails_hf_parity(made, tmp_path, mutant):
    checkpoint, package = made["bitlinear"]
    broken = copy_package(package, tmp_path / mutant)
    if mutant in MUTANTS:
        assert edit_initializers(broken, *MUTANTS[mutant])
    else:
        assert _without_activation_quantization(broken) == 15
    assert parity_error(broken, checkpoint) > 10 * BOUND


def test_packed_bitnet_other_attention_modes(made, tmp_path):
    """bias (standard Attention) equals HF like gqa; split builds and its smoke run generates."""
    checkpoint, _ = made["bitlinear"]
    bias = tmp_path / "bias"
    build(BuildOptions(str(checkpoint), bias, precision="fp32", attention="bias", smoke=False))
    assert parity_error(bias, checkpoint) < BOUND
    build(BuildOptions(str(checkpoint), tmp_path / "split", precision="fp32", attention="split", smoke=True))


def test_packed_bitnet_for_cuda_is_refused_in_one_line(made, tmp_path):
    """onnxruntime's CUDA EP has no 2-bit MatMulNBits kernel (docs/eps.md §2): nothing is written."""
    from gqa_export.errors import InputError

    checkpoint, _ = made["bitlinear"]
    with pytest.raises(InputError, match="2-bit MatMulNBits has no cuda kernel"):
        build(BuildOptions(str(checkpoint), tmp_path / "cuda", ep="cuda", precision="fp16", smoke=False))
    assert not (tmp_path / "cuda").exists()
